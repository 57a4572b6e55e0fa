"""DictConfig / dict -> typed DatasetConfig."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from powerbench.dataset.config import DatasetConfig


def as_dataset_config(cfg: DatasetConfig | DictConfig | dict) -> DatasetConfig:
    if isinstance(cfg, DatasetConfig):
        return cfg
    merged = OmegaConf.merge(OmegaConf.structured(DatasetConfig), cfg)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]
