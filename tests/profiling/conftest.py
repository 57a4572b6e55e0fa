"""Shared helpers for the profiling tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from powerbench.config import group_config
from powerbench.model.loading import spec_from_config
from powerbench.model.spec import ModelSpec

CONF_MODEL = Path(__file__).resolve().parents[2] / "conf" / "model"


def _load_spec(name: str) -> ModelSpec:
    """ModelSpec of conf/model/<name>.yaml, composed and typed."""
    return spec_from_config(group_config("model", name))


def _shape_model_names() -> list[str]:
    """Every model yaml with both a `spec` and `stats` section."""
    names = []
    for path in sorted(CONF_MODEL.glob("*.yaml")):
        cfg = OmegaConf.load(path)
        if cfg.get("spec") is not None and cfg.get("stats") is not None:
            names.append(path.stem)
    return names


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def load_spec():
    """`load_spec(name)` -> ModelSpec of conf/model/<name>.yaml."""
    return _load_spec


@pytest.fixture(scope="session")
def shape_model_names() -> list[str]:
    return _shape_model_names()
