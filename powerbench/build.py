"""`_target_` instantiation: the one way every axis and component is built.

- `build(cfg, *args, **kwargs)`: an axis (model, dataset, predictor, solver, hardware,
  engine, simulator, tracking) from its typed config: `cfg._target_(cfg, *args, **kwargs)`.
  The config is the typed dataclass the entry point made once (`powerbench.config.typed`).
- `instantiate(node, context=..., **fixed)`: a free-form component node inside an axis (an
  engine's `ffn`): `node['_target_'](**node_keys, **fixed, **accepted_context)`.

Imports nothing beyond the standard library (the engine must import with torch alone).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any


def locate(path: str) -> Any:
    """'pkg.module.Name' -> the object."""
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ValueError(f"_target_ {path!r} is not a dotted path")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot locate _target_ {path!r}: {err}") from err


def target_of(cfg: Any) -> Any:
    """A config's `_target_` (attribute or key) as a callable."""
    target = cfg.get("_target_") if isinstance(cfg, Mapping) else getattr(cfg, "_target_", None)
    if not target:
        raise ValueError(f"{type(cfg).__name__} config has no _target_")
    return locate(target) if isinstance(target, str) else target


def build(cfg: Any, /, *args: Any, **kwargs: Any) -> Any:
    """Call `cfg._target_` with the typed config itself first, then `args` and `kwargs`."""
    return target_of(cfg)(cfg, *args, **kwargs)


def accepted_kwargs(target: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of `kwargs` that `target`'s signature names (all if it takes **kwargs)."""
    params = inspect.signature(target).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {p.name for p in params}
    return {k: v for k, v in kwargs.items() if k in names}


def instantiate(node: Mapping[str, Any], /, *, context: Mapping[str, Any] | None = None,
                **fixed: Any) -> Any:
    """Call `node['_target_']` with the node's other keys, `fixed`, and the accepted `context`.

    `_target_` is a dotted path, or (from Python, not yaml) the callable itself. Node keys
    and `fixed` are passed strictly (a typo raises TypeError); `context` entries are offered
    and passed only where the target's signature names them.
    """
    if not isinstance(node, Mapping):
        raise TypeError(f"expected a mapping with _target_, got {type(node).__name__}")
    target = target_of(node)
    params = {k: v for k, v in node.items() if k != "_target_"}
    params.update(fixed)
    offered = {k: v for k, v in (context or {}).items() if k not in params}
    return target(**params, **accepted_kwargs(target, offered))


def lazy_attributes(package: str, names: Mapping[str, str]) -> Any:
    """A package's module-level `__getattr__` that imports `names[attr]` on first use, so
    importing the package (e.g. for one light submodule) does not import its heavy parts
    (Hydra, cvxpy ...): `__getattr__ = lazy_attributes(__name__, {"solve": "pkg.solve"})`."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
