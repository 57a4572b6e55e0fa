"""PredictorSet: the batch-union API, save/load, and refusal of other model shapes."""

from __future__ import annotations

import pytest
import torch
from planted import D_MODEL, NEURONS, planted_spec

from powerbench.predictor import LayerPredictor, ModelShape, PredictorSet
from powerbench.predictor.stats import LayerPredictorStats


def _set(n_layers: int = 2, name: str = "planted") -> PredictorSet:
    torch.manual_seed(0)
    predictors = [LayerPredictor(D_MODEL, NEURONS, 8) for _ in range(n_layers)]
    for p in predictors:
        p.threshold.fill_(0.1)
    stats = [LayerPredictorStats(layer=i, rank=8, threshold=0.1, target_recall=0.9, recall=0.9,
                                 precision=0.5, predicted_active_fraction=0.2,
                                 true_active_fraction=0.1, tp=9, positives=10, predicted=18,
                                 total=100, param_count=p.param_count, param_bytes=1.0,
                                 train_s=0.1, epochs=3, val_loss=0.5, sparsity=0.9, skew=0.5)
             for i, p in enumerate(predictors)]
    return PredictorSet(ModelShape.of(planted_spec(n_layers, name)), predictors, stats, "fixed")


def test_predict_is_sorted_union_of_row_masks():
    pset = _set()
    x = torch.randn(5, D_MODEL)
    mask = pset.predict_mask(1, x)
    assert mask.shape == (5, NEURONS) and mask.dtype == torch.bool
    idx = pset.predict(1, x)
    assert idx.dtype == torch.int64
    assert torch.equal(idx, torch.nonzero(mask.any(0)).flatten())
    assert torch.all(idx[1:] > idx[:-1])
    assert 0 < idx.numel() < NEURONS
    # a single token: its own mask
    assert torch.equal(pset.predict(0, x[:1]), torch.nonzero(pset.predict_mask(0, x[:1])[0])
                       .flatten())


def test_save_load_roundtrip(tmp_path):
    pset = _set()
    path = tmp_path / "p.pt"
    pset.save(path)
    loaded = PredictorSet.load(path, expect=planted_spec(2))
    x = torch.randn(7, D_MODEL)
    for layer in range(2):
        assert torch.equal(loaded.predict_mask(layer, x), pset.predict_mask(layer, x))
    assert loaded.stats == pset.stats and loaded.thresholds == pset.thresholds


def test_other_model_shape_is_refused_with_both_shapes_named(tmp_path):
    pset = _set(2, "model_a")
    other = planted_spec(3, "model_b")
    with pytest.raises(ValueError) as err:
        pset.check_compatible(other)
    message = str(err.value)
    assert "model_a" in message and "n_layers=2" in message
    assert "model_b" in message and "n_layers=3" in message
    path = tmp_path / "p.pt"
    pset.save(path)
    with pytest.raises(ValueError, match="model_b"):
        PredictorSet.load(path, expect=other)
    pset.check_compatible(planted_spec(2, "model_a"))  # the same shape is fine


def test_wrong_input_width_and_layer_are_refused():
    pset = _set()
    with pytest.raises(ValueError, match="d_model=32"):
        pset.predict(0, torch.randn(2, D_MODEL + 1))
    with pytest.raises(IndexError):
        pset.predict(2, torch.randn(2, D_MODEL))
