"""Hydra configuration: typed schemas and their registration."""

from powerbench.config.schema import BenchConfig, EvalConfig, ExperimentConfig, ProfileConfig
from powerbench.config.store import register_configs

__all__ = ["BenchConfig", "EvalConfig", "ExperimentConfig", "ProfileConfig", "register_configs"]
