"""Accuracy of dense and sparse inference: perplexity (and, later, multiple choice)."""

from powerbench.evaluation.perplexity import (
    PerplexityResult,
    hf_logits_fn,
    perplexity,
    token_windows,
)

__all__ = ["PerplexityResult", "hf_logits_fn", "perplexity", "token_windows"]
