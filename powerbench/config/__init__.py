"""Hydra configuration: typed schemas, their registration, and composition helpers."""

from powerbench.config.compose import CONF_DIR, compose_config, hydra_context
from powerbench.config.schema import BenchConfig, EvalConfig, PowerbenchConfig, ProfilingConfig
from powerbench.config.store import register_configs

__all__ = ["CONF_DIR", "BenchConfig", "EvalConfig", "PowerbenchConfig", "ProfilingConfig",
           "compose_config", "hydra_context", "register_configs"]
