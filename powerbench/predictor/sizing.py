"""Adaptive sizing rules (PowerInfer section 5.1): a layer's predictor width from its
sparsity (mean active neurons per token) and skew (share of neurons covering 80% of
activations; 0.8 for a flat layer, smaller = more skewed)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from powerbench.predictor.config import AdaptiveConfig
from powerbench.profiling.activation_profile import LayerProfile


def round_rank(r: float, cfg: AdaptiveConfig) -> int:
    rounded = int(math.ceil(r / cfg.rank_multiple)) * cfg.rank_multiple
    return int(min(max(rounded, cfg.min_rank), cfg.max_rank))


def skew_scale(skew: float, cfg: AdaptiveConfig) -> float:
    """<= 1: how much a layer's predictor shrinks for its skew (1 for a flat layer)."""
    ratio = max(skew, 1e-9) / cfg.skew_reference
    return float(min(max(ratio ** cfg.skew_power, cfg.min_skew_scale), 1.0))


@dataclass(frozen=True)
class InitialSize:
    from_sparsity: float  # rank_per_active x mean active neurons per token
    skew_scale: float
    rank: int


def initial_rank(layer: LayerProfile, cfg: AdaptiveConfig) -> InitialSize:
    active = layer.active_fraction * layer.n_neurons
    base = cfg.rank_per_active * active
    scale = skew_scale(layer.skew(0.8), cfg)
    return InitialSize(from_sparsity=base, skew_scale=scale, rank=round_rank(base * scale, cfg))


def grown_rank(rank: int, cfg: AdaptiveConfig) -> int:
    """The next size for a layer that missed its target (== rank when at max_rank)."""
    return round_rank(max(rank * cfg.grow_factor, rank + cfg.rank_multiple), cfg)


def shrunk_rank(rank: int, cfg: AdaptiveConfig) -> int:
    """The next smaller size tried for the parameter budget (== rank when it cannot shrink)."""
    smaller = int(rank / cfg.grow_factor) // cfg.rank_multiple * cfg.rank_multiple
    return min(max(smaller, cfg.min_rank), rank)
