"""Decision thresholds for a target recall, and the confusion counts they give.

Recall is micro-averaged: active neurons predicted active / active neurons, over all
(token, neuron) pairs of a split. The threshold is a logit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the functions take tensors; Confusion alone imports without torch
    from torch import Tensor


def threshold_for_recall(logits: Tensor, mask: Tensor, target: float, z: float = 0.0) -> float:
    """Largest threshold whose recall on (logits, mask) is at least `target`, or, with
    z > 0, at least target + z standard errors (so a fresh sample from the same
    distribution also reaches `target` with ~one-sided-normal(z / sqrt 2) confidence).

    With P positives, at most floor((1 - goal) * P) of them may fall below it: the
    threshold is the positive logit at that rank. No positives: +inf (predict nothing).
    """
    threshold = _quantile_threshold(logits, mask, target)
    if z > 0 and math.isfinite(threshold):
        se = recall_standard_error(logits >= threshold, mask)
        threshold = _quantile_threshold(logits, mask, min(target + z * se, 1.0))
    return threshold


def recall_standard_error(predicted: Tensor, mask: Tensor) -> float:
    """Standard error of the pooled recall sum(tp) / sum(pos) over rows (ratio estimator;
    rows are tokens, whose neurons are correlated, so this is wider than binomial)."""
    tp = (predicted.bool() & mask.bool()).sum(dim=1).double()
    pos = mask.bool().sum(dim=1).double()
    n = tp.numel()
    if n < 2 or float(pos.sum()) == 0:
        return 0.0
    ratio = tp.sum() / pos.sum()
    var = ((tp - ratio * pos) ** 2).sum() / (n - 1) / (n * pos.mean() ** 2)
    return float(var.sqrt())


def _quantile_threshold(logits: Tensor, mask: Tensor, target: float) -> float:
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target recall must be in (0, 1], got {target}")
    positive = logits[mask.bool()].float()
    if positive.numel() == 0:
        return math.inf
    allowed_misses = int(math.floor((1.0 - target) * positive.numel() + 1e-9))
    allowed_misses = min(allowed_misses, positive.numel() - 1)
    return float(positive.kthvalue(allowed_misses + 1).values)


@dataclass(frozen=True)
class Confusion:
    """Counts over a split's (token, neuron) pairs."""

    tp: int
    positives: int  # truly active
    predicted: int  # predicted active
    total: int  # tokens x neurons

    @classmethod
    def of(cls, predicted: Tensor, mask: Tensor) -> Confusion:
        predicted, mask = predicted.bool(), mask.bool()
        return cls(tp=int((predicted & mask).sum()), positives=int(mask.sum()),
                   predicted=int(predicted.sum()), total=int(mask.numel()))

    def __add__(self, other: Confusion) -> Confusion:
        return Confusion(self.tp + other.tp, self.positives + other.positives,
                         self.predicted + other.predicted, self.total + other.total)

    @property
    def recall(self) -> float:
        return self.tp / self.positives if self.positives else 1.0

    @property
    def precision(self) -> float:
        return self.tp / self.predicted if self.predicted else 1.0

    @property
    def predicted_active_fraction(self) -> float:
        return self.predicted / self.total if self.total else 0.0

    @property
    def true_active_fraction(self) -> float:
        return self.positives / self.total if self.total else 0.0


def confusion_at(logits: Tensor, mask: Tensor, threshold: float) -> Confusion:
    return Confusion.of(logits >= threshold, mask)
