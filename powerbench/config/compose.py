"""Composing the project's Hydra configuration outside `@hydra.main` (scripts, tests)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


@contextmanager
def hydra_context() -> Iterator[None]:
    """Typed schemas registered and `conf/` initialised: `hydra.compose` works inside."""
    from hydra import initialize_config_dir

    from powerbench.config.store import register_configs

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        yield


def compose_config(overrides: Sequence[str] = (), config_name: str = "config") -> Any:
    """The experiment config `powerbench <overrides>` would run (a DictConfig)."""
    from hydra import compose

    with hydra_context():
        return compose(config_name=config_name, overrides=list(overrides))
