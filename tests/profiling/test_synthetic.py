"""Synthetic profiles hit the published statistics."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from powerbench.profiling.synthetic import _draw_profile, synthetic_profile
from powerbench.profiling.synthetic_fit import (
    SKEW_ANCHORS,
    SyntheticTargets,
    default_skews,
    fit_probabilities,
)

N_TOKENS = 100_000


@pytest.fixture(scope="module")
def opt30b(load_spec):
    return synthetic_profile(load_spec("opt_30b"), trace_tokens=256, seed=0)


@pytest.fixture(scope="module")
def llama70b(load_spec):
    return synthetic_profile(load_spec("llama_reglu_70b"), trace_tokens=128, seed=0)


@pytest.mark.parametrize("fixture, sparsity, block, model", [
    ("opt30b", 0.97, 0.26, 0.17),
    ("llama70b", 0.82, 0.43, 0.26),
])
def test_published_targets_hit(request, fixture, sparsity, block, model):
    profile = request.getfixturevalue(fixture)
    assert profile.source == "synthetic"
    assert abs(profile.sparsity - sparsity) < 0.005
    assert abs(profile.block_skew() - block) < 0.03
    assert abs(profile.model_skew() - model) < 0.03
    assert profile.meta["fit"]["converged"]
    # per-token fractions and traces are drawn from the same probabilities
    token_mean = np.mean([layer.token_active.mean() for layer in profile.layers])
    assert abs(token_mean - (1 - sparsity)) < 0.002
    trace_mean = np.mean([layer.trace_masks().mean() for layer in profile.layers])
    assert abs(trace_mean - (1 - sparsity)) < 0.005


def test_opt30b_cold_prefix(opt30b):
    for layer in opt30b.layers[:24]:
        assert layer.active_fraction < 0.01
        assert np.quantile(layer.token_active, 0.999) < 0.01
        assert np.quantile(layer.trace_masks().mean(axis=1), 0.99) < 0.01
    assert np.mean([layer.active_fraction for layer in opt30b.layers[24:]]) > 0.04


def test_hot_neurons_are_shuffled_and_traces_follow_counts(opt30b):
    layer = opt30b.layers[30]
    freq = layer.frequency
    n = layer.n_neurons
    assert freq.shape == (n,) and opt30b.frequencies().shape == (48, n)
    assert not np.all(np.diff(freq) >= 0)
    hot = np.argsort(freq)[-n // 10:]
    assert abs(hot.mean() / n - 0.5) < 0.05  # hot ids spread over the whole range
    traced = layer.trace_masks().mean(axis=0)
    hottest, coldest = np.argsort(freq)[-200:], np.argsort(freq)[:n // 2]
    assert abs(traced[hottest].mean() - freq[hottest].mean()) < 0.05
    assert abs(traced[coldest].mean() - freq[coldest].mean()) < 0.1 * freq[coldest].mean()
    assert layer.trace_masks().shape == (256, n)


def _assert_same(a, b):
    assert a.meta == b.meta and a.n_tokens == b.n_tokens and len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers, strict=True):
        np.testing.assert_array_equal(la.counts, lb.counts)
        np.testing.assert_array_equal(la.token_active, lb.token_active)
        np.testing.assert_array_equal(la.trace, lb.trace)


def test_deterministic_for_a_seed(load_spec):
    spec = load_spec("opt_13b")
    a = synthetic_profile(spec, trace_tokens=32, seed=3, n_tokens=5000)
    b = _draw_profile(spec, trace_tokens=32, seed=3, n_tokens=5000)  # fresh, not memoised
    c = synthetic_profile(spec, trace_tokens=32, seed=4, n_tokens=5000)
    _assert_same(a, b)
    for la, lc in zip(a.layers, c.layers, strict=True):
        assert not np.array_equal(la.trace, lc.trace)


def test_memo_hands_out_copies_keyed_by_every_input(load_spec):
    """A second call with the same inputs is the kept profile, but a caller that changes
    its own cannot change what the next caller gets; any input change redraws."""
    spec = load_spec("opt_13b")
    first = synthetic_profile(spec, trace_tokens=16, seed=5, n_tokens=4000)
    with pytest.raises(ValueError, match="read-only"):
        first.layers[0].counts[:] = -1
    with pytest.raises(ValueError, match="read-only"):
        first.layers[0].trace[0] = 0
    first.layers[0].counts = first.layers[0].counts * 0
    first.meta["seed"] = 99
    first.layers.pop()
    again = synthetic_profile(spec, trace_tokens=16, seed=5, n_tokens=4000)
    _assert_same(again, _draw_profile(spec, trace_tokens=16, seed=5, n_tokens=4000))
    assert synthetic_profile(spec, trace_tokens=8, seed=5, n_tokens=4000).trace_tokens == 8
    assert synthetic_profile(spec, trace_tokens=16, seed=5, n_tokens=2000).n_tokens == 2000
    other_seed = synthetic_profile(spec, trace_tokens=16, seed=6, n_tokens=4000)
    assert not np.array_equal(other_seed.layers[0].counts, again.layers[0].counts)
    denser = replace(spec, stats=replace(spec.stats, token_sparsity=0.5))
    assert abs(synthetic_profile(denser, trace_tokens=16, seed=5, n_tokens=4000).sparsity
               - 0.5) < 0.01


def test_moe_only_routed_experts_fire(load_spec):
    spec = load_spec("turbosparse_mixtral_47b")
    profile = synthetic_profile(spec, trace_tokens=64, seed=0, n_tokens=20_000)
    assert profile.layers[0].n_neurons == 8 * 14336
    per_expert_active = 1 - spec.stats.token_sparsity
    assert abs((1 - profile.sparsity) - 2 / 8 * per_expert_active) < 0.002
    for layer in profile.layers[::8]:
        masks = layer.trace_masks().reshape(64, 8, 14336)
        experts_used = masks.any(axis=2).sum(axis=1)
        assert experts_used.max() <= 2 and experts_used.min() == 2
        fired = masks.sum(axis=2)[masks.any(axis=2)] / 14336
        assert abs(fired.mean() - layer.active_fraction * 4) < 0.01


def test_every_shape_model_fits(load_spec, shape_model_names):
    names = shape_model_names
    assert {"opt_30b", "llama_reglu_70b", "opt_175b", "turbosparse_mixtral_47b"} <= set(names)
    for name in names:
        spec = load_spec(name)
        targets = SyntheticTargets.from_spec(spec)
        fit = fit_probabilities(targets, spec.n_layers, spec.neurons_per_layer)
        assert fit.converged, name
        assert abs(fit.active - targets.active) < 1e-4, name
        assert abs(fit.block_skew - targets.block_skew) < 0.01, name
        assert abs(fit.model_skew - targets.model_skew) < 0.01, name


def test_opt175b_builds_fast(load_spec):
    spec = load_spec("opt_175b")
    start = time.perf_counter()
    profile = _draw_profile(spec, trace_tokens=256, seed=0, n_tokens=100_000)  # not memoised
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0
    assert profile.n_layers == 96 and profile.layers[0].trace.shape == (256, 49152 // 8)
    assert abs(profile.sparsity - 0.97) < 0.005


def test_default_skews_interpolate_published_points():
    for active, block, model in SKEW_ANCHORS:
        assert default_skews(active) == pytest.approx((block, model))
    block7, model7 = default_skews(0.30)
    assert 0.43 < block7 < 0.69 and 0.26 < model7 < 0.75
    assert default_skews(0.01) == pytest.approx(SKEW_ANCHORS[0][1:])


def test_unreachable_target_is_flagged():
    targets = SyntheticTargets(active=0.05, block_skew=0.3, model_skew=0.6)
    fit = fit_probabilities(targets, 4, 4096)
    assert not fit.converged
    assert fit.model_skew < 0.6


def test_missing_stats_rejected(load_spec):
    from dataclasses import replace

    spec = replace(load_spec("opt_13b"), stats=None)
    with pytest.raises(ValueError, match="no published sparsity stats"):
        synthetic_profile(spec)
