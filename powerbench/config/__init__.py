"""Hydra configuration: typed schemas, their registration, composition, conversion."""

from powerbench.config.compose import (
    CONF_DIR,
    as_container,
    as_yaml,
    compose_config,
    group_config,
    hydra_context,
    load_config,
    typed,
)
from powerbench.config.schema import BenchConfig, EvalConfig, PowerbenchConfig, ProfilingConfig
from powerbench.config.store import register_configs

__all__ = ["CONF_DIR", "BenchConfig", "EvalConfig", "PowerbenchConfig", "ProfilingConfig",
           "as_container", "as_yaml", "compose_config", "group_config", "hydra_context",
           "load_config", "register_configs", "typed"]
