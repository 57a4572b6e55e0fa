"""`load_texts(cfg)`: build the dataset config's `_target_` loader."""

from __future__ import annotations

from typing import Any

from powerbench.build import build
from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.split import TextSplit


def load_texts(cfg: DatasetConfig, **kwargs: Any) -> TextSplit:
    """The dataset's documents, split into train and held-out (see DatasetConfig)."""
    split = build(cfg, **kwargs)
    if not isinstance(split, TextSplit):
        raise TypeError(f"{cfg._target_} returned {type(split).__name__}, not TextSplit")
    return split
