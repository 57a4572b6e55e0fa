"""Training one layer's predictor: seeded, deterministic, early-stopped on validation."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from powerbench.predictor.config import TrainConfig
from powerbench.predictor.losses import make_loss
from powerbench.predictor.model import LayerPredictor
from powerbench.threads import torch_threads


@dataclass(frozen=True)
class SampleSplit:
    """Sample indices (shared by every layer: sample s is the same token everywhere)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


def split_samples(n: int, val_fraction: float, test_fraction: float, seed: int) -> SampleSplit:
    n_val, n_test = int(round(n * val_fraction)), int(round(n * test_fraction))
    if n_val < 1 or n_test < 1 or n - n_val - n_test < 1:
        raise ValueError(f"{n} samples cannot be split into train/val/test with fractions "
                         f"val={val_fraction}, test={test_fraction}")
    perm = np.random.default_rng(seed).permutation(n)
    return SampleSplit(train=np.sort(perm[n_val + n_test:]), val=np.sort(perm[:n_val]),
                       test=np.sort(perm[n_val:n_val + n_test]))


@dataclass
class LayerData:
    """One layer's samples as float32 inputs and bool targets, already split."""

    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    x_test: Tensor
    y_test: Tensor

    @classmethod
    def from_arrays(cls, hidden: np.ndarray, masks: np.ndarray, split: SampleSplit) -> LayerData:
        if hidden.shape[0] != masks.shape[0]:
            raise ValueError(f"{hidden.shape[0]} hidden states but {masks.shape[0]} masks")
        x = torch.from_numpy(np.asarray(hidden, dtype=np.float32))
        y = torch.from_numpy(np.asarray(masks, dtype=bool))
        parts = {}
        for name in ("train", "val", "test"):
            idx = torch.from_numpy(getattr(split, name)).long()
            parts[f"x_{name}"], parts[f"y_{name}"] = x[idx], y[idx]
        return cls(**parts)

    @property
    def d_model(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def n_neurons(self) -> int:
        return int(self.y_train.shape[1])


@dataclass
class TrainedLayer:
    predictor: LayerPredictor
    val_logits: Tensor  # [n_val, neurons] for threshold tuning
    test_logits: Tensor  # [n_test, neurons] for the reported statistics
    train_s: float
    epochs: int
    best_val_loss: float
    pos_weight: float


@torch.no_grad()
def _logits(model: LayerPredictor, x: Tensor, batch: int = 4096) -> Tensor:
    return torch.cat([model(x[i:i + batch]) for i in range(0, x.shape[0], batch)])


def train_layer(data: LayerData, rank: int, cfg: TrainConfig, seed: int) -> TrainedLayer:
    """AdamW on the configured loss; keeps the weights of the best validation epoch."""
    with torch_threads(cfg.threads):
        return _train_layer(data, rank, cfg, seed)


def _train_layer(data: LayerData, rank: int, cfg: TrainConfig, seed: int) -> TrainedLayer:
    start = time.perf_counter()
    y_train = data.y_train.float()
    loss_fn, pos_weight = make_loss(cfg, float(y_train.mean()))
    y_val = data.y_val.float()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LayerPredictor(data.d_model, data.n_neurons, rank, cfg.arch)
    generator = torch.Generator().manual_seed(seed)
    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    best_loss, best_state, bad, epochs = float("inf"), copy.deepcopy(model.state_dict()), 0, 0
    n = data.x_train.shape[0]
    for epoch in range(1, cfg.max_epochs + 1):
        epochs = epoch
        model.train()
        order = torch.randperm(n, generator=generator)
        for i in range(0, n, cfg.batch_size):
            idx = order[i:i + cfg.batch_size]
            loss = loss_fn(model(data.x_train[idx]), y_train[idx])
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
        model.eval()
        val_loss = float(loss_fn(_logits(model, data.x_val), y_val))
        if val_loss < best_loss * (1.0 - cfg.min_delta):
            best_loss, best_state, bad = val_loss, copy.deepcopy(model.state_dict()), 0
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return TrainedLayer(
        predictor=model, val_logits=_logits(model, data.x_val),
        test_logits=_logits(model, data.x_test), train_s=time.perf_counter() - start,
        epochs=epochs, best_val_loss=best_loss, pos_weight=pos_weight,
    )
