"""Config coercion shared by the solvers (each `_target_` receives its config node)."""

from __future__ import annotations

from typing import Any, TypeVar

from omegaconf import OmegaConf

from powerbench.hardware.load import plain_node

T = TypeVar("T")


def as_config(cfg: Any, schema: type[T]) -> T:
    """A typed config from a DictConfig / dict / instance (unknown keys fail here)."""
    if isinstance(cfg, schema):
        return cfg
    merged = OmegaConf.merge(OmegaConf.structured(schema), plain_node(cfg))
    return OmegaConf.to_object(merged)  # type: ignore[return-value]
