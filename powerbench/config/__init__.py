"""Hydra configuration: typed schemas, their registration, composition, conversion.

The schemas import no Hydra (the torch-only experiments/bench_gpu.py uses `BenchConfig`);
composition and registration (`compose`, `store`: Hydra, omegaconf) load on first use.
"""

from importlib import import_module
from typing import Any

from powerbench.config.schema import BenchConfig, EvalConfig, PowerbenchConfig, ProfilingConfig

_MODULE_OF = {"CONF_DIR": "conf_dir", "as_container": "compose", "as_yaml": "compose",
              "compose_config": "compose", "group_config": "compose",
              "hydra_context": "compose", "load_config": "compose", "typed": "compose",
              "register_configs": "store"}

__all__ = ["BenchConfig", "EvalConfig", "PowerbenchConfig", "ProfilingConfig", *_MODULE_OF]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"powerbench.config.{_MODULE_OF[name]}"), name)
