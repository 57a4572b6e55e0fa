"""Predictors learn a planted mask rule; thresholds meet the target recall on held-out data."""

from __future__ import annotations

import math

import pytest
import torch
from planted import flat_frequencies, planted_layer

from powerbench.predictor.config import LossKind, PredictorArch, TrainConfig
from powerbench.predictor.threshold import (
    confusion_at,
    recall_standard_error,
    threshold_for_recall,
)
from powerbench.predictor.training import LayerData, split_samples, train_layer

FAST = TrainConfig(max_epochs=40, patience=5)


def _data(seed: int = 1, n: int = 3000) -> LayerData:
    layer = planted_layer(0, flat_frequencies(0.1), n=n, seed=seed)
    split = split_samples(n, FAST.val_fraction, FAST.test_fraction, FAST.seed)
    return LayerData.from_arrays(layer.hidden, layer.masks, split)


def test_predictor_learns_planted_mask_rule():
    data = _data()
    trained = train_layer(data, rank=16, cfg=FAST, seed=0)
    threshold = threshold_for_recall(trained.val_logits, data.y_val, 0.95)
    test = confusion_at(trained.test_logits, data.y_test, threshold)
    # a predictor that ignores x cannot beat precision = base rate (~0.1) at this recall
    assert test.recall > 0.93
    assert test.precision > 0.75, test
    assert test.predicted_active_fraction < 0.15
    # and the untrained (random-init) predictor of the same shape does not get there
    untrained = train_layer(data, rank=16, cfg=TrainConfig(max_epochs=0), seed=0)
    t0 = threshold_for_recall(untrained.val_logits, data.y_val, 0.95)
    assert confusion_at(untrained.test_logits, data.y_test, t0).precision < 0.3


def test_lowrank_focal_variant_also_learns():
    data = _data(seed=3)
    cfg = TrainConfig(max_epochs=40, patience=5, arch=PredictorArch.lowrank, loss=LossKind.focal)
    trained = train_layer(data, rank=16, cfg=cfg, seed=0)
    threshold = threshold_for_recall(trained.val_logits, data.y_val, 0.9)
    assert confusion_at(trained.test_logits, data.y_test, threshold).precision > 0.6


def test_training_is_deterministic():
    data = _data(n=1000)
    a = train_layer(data, 8, TrainConfig(max_epochs=5), seed=7).predictor.state_dict()
    b = train_layer(data, 8, TrainConfig(max_epochs=5), seed=7).predictor.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_threshold_meets_target_recall_on_held_out_samples():
    data = _data(seed=5, n=4000)
    trained = train_layer(data, rank=16, cfg=FAST, seed=0)
    for target in (0.9, 0.95, 0.99):
        threshold = threshold_for_recall(trained.val_logits, data.y_val, target, z=3.0)
        held_out = confusion_at(trained.test_logits, data.y_test, threshold)
        assert held_out.recall >= target, (target, held_out)
        assert held_out.predicted_active_fraction < 0.5  # not "predict everything"
    # higher targets need lower thresholds and predict more neurons
    t90 = threshold_for_recall(trained.val_logits, data.y_val, 0.9)
    t99 = threshold_for_recall(trained.val_logits, data.y_val, 0.99)
    assert t99 < t90


def test_threshold_for_recall_hand_computed():
    logits = torch.tensor([[0.9, 0.1, 0.5, 0.3], [0.7, 0.2, 0.8, 0.05]])
    mask = torch.tensor([[1, 0, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    # positives 0.9, 0.5, 0.3, 0.7: recall 0.75 allows one miss -> threshold 0.5
    assert threshold_for_recall(logits, mask, 0.75) == pytest.approx(0.5)
    assert threshold_for_recall(logits, mask, 1.0) == pytest.approx(0.3)
    stats = confusion_at(logits, mask, 0.5)
    assert (stats.tp, stats.positives, stats.predicted) == (3, 4, 4)
    assert math.isclose(stats.precision, 0.75)
    assert threshold_for_recall(logits, torch.zeros_like(mask), 0.9) == math.inf


def test_recall_standard_error_zero_when_rows_agree():
    mask = torch.tensor([[1, 1, 0, 0]] * 4, dtype=torch.bool)
    predicted = torch.tensor([[1, 0, 0, 0]] * 4, dtype=torch.bool)
    assert recall_standard_error(predicted, mask) == 0.0
    predicted[0, 1] = True
    assert recall_standard_error(predicted, mask) > 0.0
