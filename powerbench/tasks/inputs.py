"""What the measuring tasks start from: the model, its texts and its activation profile."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powerbench.build import build
from powerbench.config import PowerbenchConfig
from powerbench.dataset import TextSplit, load_texts
from powerbench.paths import cache_dir
from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.profiling.store import load_or_profile


@dataclass
class ModelInputs:
    cache: Path
    loaded: Any  # LoadedModel (with weights)
    split: TextSplit
    profile: ActivationProfile


def model_inputs(cfg: PowerbenchConfig) -> ModelInputs:
    """The experiment's model (built), dataset split and measured profile (cached)."""
    cache = cache_dir(cfg.cache_dir)
    loaded = build(cfg.model, cache_dir=cache)
    split = load_texts(cfg.dataset)
    profile, _ = load_or_profile(loaded, split.train, cfg.profiling, split.name, cache,
                                 seed=cfg.seed)
    return ModelInputs(cache, loaded, split, profile)
