"""Losses for ~90%-negative multi-label targets (one label per FFN neuron)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from powerbench.predictor.config import LossKind, TrainConfig

LossFn = Callable[[Tensor, Tensor], Tensor]  # (logits, float targets) -> scalar


def weighted_bce(pos_weight: float) -> LossFn:
    weight = torch.tensor(pos_weight)

    def loss(logits: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(logits, target, pos_weight=weight)

    return loss


def focal(pos_weight: float, gamma: float) -> LossFn:
    """Positive-weighted BCE times (1 - p_t)^gamma (Lin et al., 2017)."""
    weight = torch.tensor(pos_weight)

    def loss(logits: Tensor, target: Tensor) -> Tensor:
        ce = F.binary_cross_entropy_with_logits(logits, target, pos_weight=weight,
                                                reduction="none")
        p = torch.sigmoid(logits)
        p_t = p * target + (1 - p) * (1 - target)
        return ((1 - p_t).pow(gamma) * ce).mean()

    return loss


_LOSSES: dict[LossKind, Callable[[float, TrainConfig], LossFn]] = {
    LossKind.bce: lambda w, cfg: weighted_bce(w),
    LossKind.focal: lambda w, cfg: focal(w, cfg.focal_gamma),
}


def make_loss(cfg: TrainConfig, positive_rate: float) -> tuple[LossFn, float]:
    """The configured loss and the positive weight it uses (auto: negatives / positives)."""
    if cfg.pos_weight is not None:
        weight = float(cfg.pos_weight)
    else:
        rate = min(max(positive_rate, 1e-6), 1.0)
        weight = min((1.0 - rate) / rate, cfg.max_pos_weight)
    weight = max(weight, 1e-3)
    return _LOSSES[LossKind(cfg.loss)](weight, cfg), weight
