"""powerbench: a benchmarking framework for activation-sparse LLM inference."""

__version__ = "0.1.0"
