"""`load_texts(cfg)`: call the dataset config's `_target_` loader."""

from __future__ import annotations

from typing import Any

from hydra.utils import get_method
from omegaconf import DictConfig

from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.split import TextSplit
from powerbench.dataset.validate import as_dataset_config


def load_texts(cfg: DatasetConfig | DictConfig | dict, **kwargs: Any) -> TextSplit:
    """The dataset's documents, split into train and held-out (see DatasetConfig)."""
    typed = as_dataset_config(cfg)
    split = get_method(typed._target_)(typed, **kwargs)
    if not isinstance(split, TextSplit):
        raise TypeError(f"{typed._target_} returned {type(split).__name__}, not TextSplit")
    return split
