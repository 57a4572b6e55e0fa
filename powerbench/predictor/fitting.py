"""Fitting per-layer predictors to a profile: data, training, threshold, statistics.

`LayerFitter` splits the profile's samples once (the same tokens in every layer),
trains a layer at a given rank (memoised, so sizing loops retrain only what changed),
tunes its threshold on validation for a target recall and measures it on test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from powerbench.model.spec import ModelSpec, WeightDType, bytes_per_param
from powerbench.predictor.config import TrainConfig
from powerbench.predictor.predictor_set import ModelShape, PredictorSet
from powerbench.predictor.stats import LayerPredictorStats
from powerbench.predictor.threshold import Confusion, confusion_at, threshold_for_recall
from powerbench.predictor.training import LayerData, TrainedLayer, split_samples, train_layer
from powerbench.profiling.activation_profile import ActivationProfile


def check_profile_samples(profile: ActivationProfile, spec: ModelSpec) -> int:
    """Number of (hidden, mask) samples; ValueError if missing or shaped for another model."""
    shape = ModelShape.of(spec)
    if profile.n_layers != shape.n_layers:
        raise ValueError(f"profile of {profile.model!r} has {profile.n_layers} layers, "
                         f"model {shape} has {shape.n_layers}")
    counts = set()
    for layer in profile.layers:
        if layer.hidden is None or layer.masks is None:
            raise ValueError(
                f"profile of {profile.model!r} ({profile.source}) has no (hidden, mask) "
                f"samples in layer {layer.index}; trained predictors need a measured profile "
                "of a model with weights")
        if layer.hidden.shape[1] != shape.d_model or layer.masks.shape[1] != shape.neurons:
            raise ValueError(
                f"profile layer {layer.index} samples are [{layer.hidden.shape[1]} -> "
                f"{layer.masks.shape[1]}], model {shape} needs [{shape.d_model} -> "
                f"{shape.neurons}]")
        counts.add(layer.hidden.shape[0])
    if len(counts) != 1:
        raise ValueError(f"layers hold different sample counts: {sorted(counts)}")
    return counts.pop()


@dataclass
class LayerFit:
    trained: TrainedLayer
    stats: LayerPredictorStats
    val: Confusion  # at the tuned threshold (sizing decisions use validation, not test)


class LayerFitter:
    def __init__(self, spec: ModelSpec, profile: ActivationProfile, train: TrainConfig,
                 weight_dtype: WeightDType | str = "fp16") -> None:
        n = check_profile_samples(profile, spec)
        self.spec, self.profile, self.train_cfg = spec, profile, train
        self.shape = ModelShape.of(spec)
        self.bytes_per_param = bytes_per_param(weight_dtype)
        self.split = split_samples(n, train.val_fraction, train.test_fraction, train.seed)
        self._data: dict[int, LayerData] = {}
        self._trained: dict[tuple[int, int], TrainedLayer] = {}
        self.train_s_total = 0.0  # every training run, including discarded sizes

    def data(self, layer: int) -> LayerData:
        if layer not in self._data:
            lp = self.profile.layers[layer]
            self._data[layer] = LayerData.from_arrays(lp.hidden, lp.masks, self.split)
        return self._data[layer]

    def trained(self, layer: int, rank: int) -> TrainedLayer:
        key = (layer, rank)
        if key not in self._trained:
            # seed depends on the layer only: the same layer at the same rank is reproducible
            result = train_layer(self.data(layer), rank, self.train_cfg,
                                 seed=self.train_cfg.seed * 1000 + layer)
            self.train_s_total += result.train_s
            self._trained[key] = result
        return self._trained[key]

    def fit(self, layer: int, rank: int, target_recall: float, margin: float = 0.0,
            z: float = 0.0, max_threshold: float | None = None,
            initial_rank: int = 0) -> LayerFit:
        """Train (or reuse) at `rank`, tune the threshold, measure on test."""
        trained = self.trained(layer, rank)
        data = self.data(layer)
        goal = min(target_recall + margin, 1.0)
        threshold = threshold_for_recall(trained.val_logits, data.y_val, goal, z)
        if max_threshold is not None:
            threshold = min(threshold, max_threshold)
        trained.predictor.threshold.fill_(threshold)
        test = confusion_at(trained.test_logits, data.y_test, threshold)
        val = confusion_at(trained.val_logits, data.y_val, threshold)
        lp = self.profile.layers[layer]
        params = trained.predictor.param_count
        stats = LayerPredictorStats(
            layer=layer, rank=rank, threshold=threshold, target_recall=target_recall,
            recall=test.recall, precision=test.precision,
            predicted_active_fraction=test.predicted_active_fraction,
            true_active_fraction=test.true_active_fraction, tp=test.tp,
            positives=test.positives, predicted=test.predicted, total=test.total,
            param_count=params, param_bytes=params * self.bytes_per_param,
            train_s=trained.train_s, epochs=trained.epochs, val_loss=trained.best_val_loss,
            sparsity=lp.sparsity, skew=lp.skew(0.8), initial_rank=initial_rank or rank,
        )
        return LayerFit(trained, stats, val)

    def assemble(self, fits: list[LayerFit], strategy: str, info: dict) -> PredictorSet:
        """A PredictorSet of independent copies (later threshold changes do not leak in)."""
        predictors = []
        for fit in fits:
            p = type(fit.trained.predictor)(**fit.trained.predictor.describe())
            p.load_state_dict(fit.trained.predictor.state_dict())
            predictors.append(p.eval().requires_grad_(False))
        return PredictorSet(self.shape, predictors, [f.stats for f in fits], strategy, info)


def sample_active_fraction(profile: ActivationProfile) -> float:
    """Mean active fraction over all layers (counts over every profiled token)."""
    return float(np.mean([layer.active_fraction for layer in profile.layers]))

