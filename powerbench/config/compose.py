"""Composing the project's Hydra configuration, and the one conversion to typed objects.

Entry points compose (or receive from `@hydra.main`) a DictConfig and call `typed` once;
everything below them takes the typed dataclasses (`PowerbenchConfig` and the group
schemas registered in powerbench.config.store) and never converts a node again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from omegaconf import DictConfig, OmegaConf

from powerbench.config.conf_dir import CONF_DIR


@contextmanager
def hydra_context() -> Iterator[None]:
    """Typed schemas registered and `conf/` initialised: `hydra.compose` works inside."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from powerbench.config.store import register_configs

    register_configs()
    if GlobalHydra.instance().is_initialized():  # already inside a Hydra app or context
        yield
        return
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        yield


def compose_config(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """The config `powerbench <overrides>` would run, as Hydra composes it (a DictConfig)."""
    from hydra import compose

    with hydra_context():
        return compose(config_name=config_name, overrides=list(overrides))


def typed(cfg: DictConfig) -> Any:
    """The composed config as typed dataclasses (every group node as its schema)."""
    return OmegaConf.to_object(cfg)


def load_config(overrides: Sequence[str] = (), config_name: str = "config") -> Any:
    """`typed(compose_config(...))`: the typed config a task would receive."""
    return typed(compose_config(overrides, config_name))


def group_config(group: str, option: str, overrides: Sequence[str] = (), **fields: Any) -> Any:
    """One group's option, typed: `group_config("solver", "ilp", ["group_size=64"])` or
    `group_config("solver", "ilp", group_size=64)`.

    Overrides are relative to the group node. Composed through Hydra, so an unknown option
    lists the valid ones and an unknown key fails; `fields` replace typed values after.
    For tests, notebooks and entry points: a task gets the configs it needs composed by Hydra
    at start-up (its yaml's defaults list, e.g. `/model@task.synthetic_model`), and no
    library module composes.
    """
    cfg = compose_config([f"{group}={option}", *(f"{group}.{o}" for o in overrides)])
    return dataclasses.replace(typed(cfg[group]), **fields)


def as_container(cfg: Any) -> dict[str, Any]:
    """A typed config (or DictConfig) as plain nested dicts, resolved (params, YAML)."""
    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg)
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)  # type: ignore[return-value]


def as_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(as_container(cfg)))
