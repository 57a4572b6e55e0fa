"""Predictors for shape-only models: sized by the strategy's rule, quality from measurement.

A paper-scale model has no weights here, so its predictors cannot be trained. The simulator
still has to charge them as PowerInfer would: their bytes (GPU memory the placement gives
them, bytes read every token) and their precision (false positives are computed too).

- Size: the strategy's own rule on the (synthetic) profile. `adaptive`: each layer's width
  from its sparsity and skew (`initial_rank`, PowerInfer section 5.1), then the widest
  layers shrink until the predictors fit `max_param_share` of the model's parameters. The
  trained strategy also grows layers that miss their recall target and shrinks cheaper
  ones; without weights those steps cannot run, so the widths are the rule's first guess.
  `fixed`: `rank` everywhere (`tail_ranks`: another rank for the last layers).
- Quality: what OUR trained predictors achieve, as a table over the true active fraction
  (`PredictorQuality`, measured with `powerbench` on models that run here and shipped in the
  simulator config); linear in log(active fraction), clamped at the measured ends.

`SizedPredictors.stats` has the per-layer fields the simulator reads from a trained
`PredictorSet` (param_bytes, predicted / true active fraction, recall), so both feed it alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from powerbench.model.spec import ModelSpec, bytes_per_param
from powerbench.predictor.config import AdaptiveConfig, FixedConfig
from powerbench.predictor.sizing import initial_rank, shrunk_rank
from powerbench.profiling.activation_profile import ActivationProfile


@dataclass(frozen=True)
class PredictorQuality:
    """Measured recall and predicted/true active ratio of trained predictors, by the
    layer's true active fraction (points sorted by active fraction)."""

    active_fraction: tuple[float, ...]
    recall: tuple[float, ...]
    predicted_over_true: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.active_fraction)
        if n == 0 or len(self.recall) != n or len(self.predicted_over_true) != n:
            raise ValueError("predictor quality needs equally long, non-empty active_fraction, "
                             "recall and predicted_over_true lists")
        if list(self.active_fraction) != sorted(self.active_fraction) or \
                min(self.active_fraction) <= 0:
            raise ValueError("predictor quality: active_fraction must be positive and sorted")

    def at(self, active: float) -> tuple[float, float]:
        """(recall, predicted / true) at a layer's true active fraction."""
        x = np.log(np.asarray(self.active_fraction))
        a = np.log(max(active, 1e-9))
        return (float(np.interp(a, x, self.recall)),
                float(np.interp(a, x, self.predicted_over_true)))


@dataclass(frozen=True)
class SizedLayer:
    layer: int
    rank: int
    param_count: int
    param_bytes: float
    true_active_fraction: float
    predicted_active_fraction: float
    recall: float


@dataclass
class SizedPredictors:
    """Per-layer predictor sizes and expected quality of a shape-only model."""

    strategy: str
    stats: list[SizedLayer]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def param_count(self) -> int:
        return sum(s.param_count for s in self.stats)

    @property
    def layer_bytes(self) -> np.ndarray:
        return np.array([s.param_bytes for s in self.stats], dtype=np.float64)

    def metrics(self, spec: ModelSpec) -> dict[str, float]:
        ranks = [s.rank for s in self.stats]
        true = np.array([s.true_active_fraction for s in self.stats])
        pred = np.array([s.predicted_active_fraction for s in self.stats])
        return {
            "predictor_param_count": float(self.param_count),
            "predictor_param_bytes": float(self.layer_bytes.sum()),
            "predictor_param_share": self.param_count / max(spec.total_params, 1),
            "predictor_mean_rank": float(np.mean(ranks)),
            "predictor_max_rank": float(np.max(ranks)),
            "predictor_recall": float(np.average([s.recall for s in self.stats], weights=true)),
            "predicted_active_fraction": float(pred.mean()),
            "true_active_fraction": float(true.mean()),
        }


def predictor_params(rank: int, spec: ModelSpec) -> int:
    """An MLP d_model -> rank -> neurons with biases (powerbench.predictor.model)."""
    return rank * (spec.d_model + spec.neurons_per_layer) + rank + spec.neurons_per_layer


def adaptive_ranks(cfg: AdaptiveConfig, spec: ModelSpec, profile: ActivationProfile) -> list[int]:
    """`initial_rank` per layer, then the widest layer shrinks one step at a time while the
    predictors exceed `max_param_share` of the model's parameters."""
    ranks = [initial_rank(layer, cfg).rank for layer in profile.layers]
    budget = cfg.max_param_share * spec.total_params
    while sum(predictor_params(r, spec) for r in ranks) > budget:
        widest = max(range(len(ranks)), key=lambda i: (ranks[i], -i))
        smaller = shrunk_rank(ranks[widest], cfg)
        if smaller >= ranks[widest]:
            break
        ranks[widest] = smaller
    return ranks


def size_predictors(cfg: Any, spec: ModelSpec, profile: ActivationProfile,
                    quality: PredictorQuality) -> SizedPredictors | None:
    """Sized predictors for `cfg` (an adaptive or fixed predictor config); None for
    strategies that have no trained predictor to size (none, oracle, threshold)."""
    if isinstance(cfg, AdaptiveConfig):
        ranks = adaptive_ranks(cfg, spec, profile)
    elif isinstance(cfg, FixedConfig):
        ranks = cfg.ranks(spec.n_layers)
    else:
        return None
    nbytes = bytes_per_param(cfg.weight_dtype)
    stats = []
    for layer, rank in zip(profile.layers, ranks, strict=True):
        true = float(layer.active_fraction)
        recall, ratio = quality.at(true)
        params = predictor_params(rank, spec)
        stats.append(SizedLayer(layer.index, rank, params, params * nbytes, true,
                                min(1.0, true * ratio), recall))
    return SizedPredictors(cfg.name, stats, {"quality_source": quality.source,
                                             "sized_by": "rule (shape-only model)"})


def quality_from_config(simulator_cfg: Any) -> PredictorQuality:
    """The simulator config's measured `predictor_quality` table (or, when it is empty, its
    flat `predicted_over_true` with recall 1)."""
    q = simulator_cfg.predictor_quality
    if q.active_fraction:
        return PredictorQuality(tuple(q.active_fraction), tuple(q.recall),
                                tuple(q.predicted_over_true), q.source)
    return PredictorQuality((1.0,), (1.0,), (simulator_cfg.predicted_over_true,),
                            "simulator.predicted_over_true")
