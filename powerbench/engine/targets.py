"""`_target_` instantiation without Hydra (the engine must import with torch alone)."""

from __future__ import annotations

import dataclasses
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


def to_plain(cfg: Any) -> dict[str, Any]:
    """A config node (dataclass, mapping, OmegaConf DictConfig) as a plain nested dict."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    if type(cfg).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf  # only when the caller already uses OmegaConf

        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    if isinstance(cfg, Mapping):
        return {k: (to_plain(v) if isinstance(v, Mapping) else v) for k, v in cfg.items()}
    raise TypeError(f"expected a config node with _target_, got {type(cfg).__name__}")


def accepted_kwargs(target: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of `kwargs` that `target`'s signature names (all if it takes **kwargs)."""
    params = inspect.signature(target).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {p.name for p in params}
    return {k: v for k, v in kwargs.items() if k in names}


def instantiate(node: Any, /, *, context: Mapping[str, Any] | None = None, **fixed: Any) -> Any:
    """Call `node['_target_']` with the node's other keys, `fixed`, and the accepted `context`.

    `_target_` is a dotted path, or (from Python, not yaml) the callable itself.

    Node keys and `fixed` are passed strictly (a typo raises TypeError); `context` entries
    are offered and passed only where the target's signature names them.
    """
    params = to_plain(node)
    if "_target_" not in params:
        raise ValueError(f"config node has no _target_: {sorted(params)}")
    target = params.pop("_target_")
    if isinstance(target, str):
        target = locate(target)
    params.update(fixed)
    offered = {k: v for k, v in (context or {}).items() if k not in params}
    return target(**params, **accepted_kwargs(target, offered))
