"""Sized (shape-only) predictors: the adaptive rule's widths, the parameter budget, and the
measured quality table they are charged at."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.model.spec import ModelSpec, SparsityStats
from powerbench.predictor.config import (
    AdaptiveConfig,
    FixedConfig,
    NoneConfig,
    TailRanksConfig,
)
from powerbench.predictor.sized import PredictorQuality, predictor_params, size_predictors
from powerbench.predictor.sizing import initial_rank
from powerbench.profiling.synthetic import synthetic_profile

QUALITY = PredictorQuality((0.01, 0.1), (0.9, 0.98), (3.0, 1.5), "hand")


@pytest.fixture(scope="module")
def model():
    spec = ModelSpec(name="sized", n_layers=6, d_model=256, d_ffn=2048, n_heads=4,
                     n_kv_heads=4, vocab_size=1000, ffn_kind="relu",
                     stats=SparsityStats(token_sparsity=0.9, source="test"))
    return spec, synthetic_profile(spec, trace_tokens=0, seed=0)


def test_quality_interpolates_in_log_active_fraction_and_clamps():
    assert QUALITY.at(0.01) == (0.9, 3.0)
    recall, ratio = QUALITY.at(np.sqrt(0.01 * 0.1))  # the log midpoint
    assert recall == pytest.approx(0.94) and ratio == pytest.approx(2.25)
    assert QUALITY.at(1e-5) == (0.9, 3.0) and QUALITY.at(0.9) == (0.98, 1.5)
    with pytest.raises(ValueError, match="sorted"):
        PredictorQuality((0.1, 0.01), (1, 1), (1, 1))


def test_adaptive_widths_follow_the_rule_and_are_charged_at_measured_quality(model):
    spec, profile = model
    cfg = AdaptiveConfig(max_param_share=1.0)
    sized = size_predictors(cfg, spec, profile, QUALITY)
    expected = [initial_rank(layer, cfg).rank for layer in profile.layers]
    assert [s.rank for s in sized.stats] == expected
    assert len(set(expected)) > 1  # deeper layers are more active: wider predictors
    for s, layer in zip(sized.stats, profile.layers, strict=True):
        assert s.param_bytes == 2 * predictor_params(s.rank, spec)  # fp16
        recall, ratio = QUALITY.at(layer.active_fraction)
        assert s.recall == recall
        assert s.predicted_active_fraction == pytest.approx(layer.active_fraction * ratio)
    m = sized.metrics(spec)
    assert m["predictor_param_bytes"] == pytest.approx(sized.layer_bytes.sum())


def test_adaptive_shrinks_the_widest_layers_to_the_parameter_budget(model):
    spec, profile = model
    cfg = AdaptiveConfig(max_param_share=0.02, min_rank=8)
    sized = size_predictors(cfg, spec, profile, QUALITY)
    assert sized.param_count <= 0.02 * spec.total_params
    free = size_predictors(AdaptiveConfig(max_param_share=1.0, min_rank=8), spec, profile,
                           QUALITY)
    assert sized.param_count < free.param_count


def test_fixed_is_one_width_and_dense_strategies_have_nothing_to_size(model):
    spec, profile = model
    sized = size_predictors(FixedConfig(rank=32), spec, profile, QUALITY)
    assert {s.rank for s in sized.stats} == {32}
    assert size_predictors(NoneConfig(), spec, profile, QUALITY) is None


def test_tail_ranks_reproduce_llm_in_a_flash_falcon_7b_predictor_share():
    # Falcon 7B (32 layers, d 4544, FFN 18176): rank 256 x 28 layers + 1152 x 4 =
    # 268.1 M parameters, the ~4% of the model LLM in a Flash reports for its predictors
    spec = ModelSpec(name="falcon7b", n_layers=32, d_model=4544, d_ffn=18176, n_heads=71,
                     n_kv_heads=1, vocab_size=65024, ffn_kind="relu",
                     stats=SparsityStats(token_sparsity=0.9, source="test"))
    profile = synthetic_profile(spec, trace_tokens=0, seed=0)
    sized = size_predictors(TailRanksConfig(rank=256, tail_layers=4, tail_rank=1152), spec,
                            profile, QUALITY)
    assert [s.rank for s in sized.stats] == [256] * 28 + [1152] * 4
    assert sized.param_count == 28 * 5_834_752 + 4 * 26_192_768
    assert sized.param_count / 6.92e9 == pytest.approx(0.039, abs=0.001)
    with pytest.raises(ValueError, match="tail_rank"):
        TailRanksConfig(tail_rank=0)
