"""Every solver on paper-scale shapes with synthetic profiles: budgets, conservation of
bytes, the C_l rule, the ILP against greedy, and clear errors when a model does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.config import group_config
from powerbench.hardware import load_hardware
from powerbench.model.loading import spec_from_config
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.solver import PlacementInfeasibleError, solve

SOLVERS = ["ilp", "greedy", "layer_offload", "all_gpu", "all_cpu"]


@pytest.fixture(scope="module")
def opt13():
    spec = spec_from_config(group_config("model", "opt_13b"))
    return spec, synthetic_profile(spec, trace_tokens=8)


@pytest.fixture(scope="module")
def opt67():
    spec = spec_from_config(group_config("model", "opt_6_7b"))
    return spec, synthetic_profile(spec, trace_tokens=8)


def _check_budgets_and_bytes(placement, spec, hw, dtype, context):
    # every weight is somewhere, exactly once
    assert placement.gpu.weights + placement.cpu.weights == pytest.approx(
        spec.total_bytes(dtype), rel=1e-12)
    assert placement.gpu.kv_cache + placement.cpu.kv_cache == pytest.approx(
        spec.kv_cache_bytes(context), rel=1e-12)
    assert placement.gpu.total <= hw.gpu_capacity + 1
    assert placement.cpu.total <= hw.cpu_capacity + 1
    assert placement.gpu.ffn == pytest.approx(
        placement.gpu_counts.sum() * spec.neuron_bytes(dtype), rel=1e-12)
    for ids in placement.gpu_neurons:
        assert np.all(np.diff(ids) > 0) and (ids.size == 0 or ids[-1] < spec.neurons_per_layer)


@pytest.mark.parametrize("name", ["ilp", "greedy", "layer_offload", "all_cpu"])
def test_solvers_respect_budgets_and_conserve_bytes(opt13, name):
    spec, profile = opt13
    hw = load_hardware(group_config("hardware", "pc_low"))
    placement = solve(group_config("solver", name), spec, profile, hw, weight_dtype="fp16", context=512)
    _check_budgets_and_bytes(placement, spec, hw, "fp16", 512)
    metrics = placement.metrics(profile)
    for key in ("gpu_neuron_load_share", "gpu_weight_bytes", "cpu_weight_bytes", "gpu_layers",
                "solve_time_s", "solver_gap"):
        assert key in metrics
    assert 0.0 <= metrics["gpu_neuron_load_share"] <= 1.0
    if name == "all_cpu":
        assert metrics["gpu_neuron_load_share"] == 0.0 and placement.gpu.total == 0.0
    else:
        assert metrics["gpu_neuron_load_share"] > 0.0


def test_hot_neuron_solvers_beat_layer_offload_on_neuron_load(opt13):
    """Same GPU, same bytes: hot neurons carry more activations than whole layers."""
    spec, profile = opt13
    share = {name: solve(group_config("solver", name, dense_gpu_share=0.0) if name != "layer_offload"
                         else group_config("solver", name), spec, profile, group_config("hardware", "pc_low")).metrics(profile)
             ["gpu_neuron_load_share"] for name in ("ilp", "greedy", "layer_offload")}
    assert share["ilp"] > share["layer_offload"]
    assert share["greedy"] > share["layer_offload"]


def test_layer_offload_matches_llama_cpp_rule(opt13):
    spec, profile = opt13
    hw = load_hardware(group_config("hardware", "pc_low"))
    placement = solve(group_config("solver", "layer_offload"), spec, profile, hw, context=512)
    per_layer = (spec.attn_bytes_per_layer("fp16") + spec.ffn_bytes_per_layer("fp16")
                 + spec.kv_cache_bytes(512) / spec.n_layers)
    fit = int((hw.gpu_capacity - 1e9) // per_layer)  # 1 GB of GPU buffers (layer_offload.yaml)
    assert placement.metrics(profile)["gpu_layers"] == fit
    on_gpu = [i for i, d in enumerate(placement.attn_device) if d == "gpu"]
    assert on_gpu == list(range(spec.n_layers - fit, spec.n_layers))  # llama.cpp: the last ones
    assert placement.lm_head_device == "cpu"  # not every layer fits
    counts = placement.gpu_counts
    assert set(counts.tolist()) == {0, spec.neurons_per_layer}
    first = solve(group_config("solver", "layer_offload", from_end=False), spec, profile, hw, context=512)
    assert [d == "gpu" for d in first.attn_device][:fit] == [True] * fit


def test_layer_offload_too_many_layers_names_the_gpu_shortfall(opt13):
    spec, profile = opt13
    with pytest.raises(PlacementInfeasibleError, match=r"GPU budget short by \d+\.\d+ GB") as err:
        solve(group_config("solver", "layer_offload", n_gpu_layers=spec.n_layers), spec, profile,
              group_config("hardware", "pc_low"))
    assert err.value.budget == "GPU" and err.value.shortfall_bytes > 0


def test_all_gpu_fits_on_a100_and_fails_on_pc_low(opt13):
    spec, profile = opt13
    a100 = solve(group_config("solver", "all_gpu"), spec, profile, group_config("hardware", "a100"), context=512)
    assert a100.metrics(profile)["gpu_neuron_load_share"] == 1.0
    assert a100.gpu_layers == spec.n_layers and a100.cpu.weights == 0.0
    with pytest.raises(PlacementInfeasibleError) as err:
        solve(group_config("solver", "all_gpu"), spec, profile, group_config("hardware", "pc_low"), context=512)
    hw = load_hardware(group_config("hardware", "pc_low"))
    need = spec.total_bytes("fp16") + spec.kv_cache_bytes(512) + 1e9  # + GPU buffers
    assert err.value.budget == "GPU"
    assert err.value.shortfall_bytes == pytest.approx(need - hw.gpu_capacity, rel=1e-9)
    assert f"{(need - hw.gpu_capacity) / 1e9:.2f} GB" in str(err.value)


@pytest.mark.parametrize("name", SOLVERS)
def test_model_that_fits_nowhere_names_budget_and_shortfall(name):
    """OPT-175B in fp16 (350 GB) on pc_low (10.5 GB GPU + 60 GB CPU usable)."""
    spec = spec_from_config(group_config("model", "opt_175b"))
    from .conftest import profile_from_counts

    profile = profile_from_counts(np.ones((spec.n_layers, spec.neurons_per_layer), dtype=int))
    hw = load_hardware(group_config("hardware", "pc_low"))
    with pytest.raises(PlacementInfeasibleError, match="short by") as err:
        solve(group_config("solver", name), spec, profile, hw, weight_dtype="fp16", context=2048)
    e = err.value
    weights = spec.total_bytes("fp16") + spec.kv_cache_bytes(2048)
    if name in ("ilp", "greedy"):
        predictors = 1024 * (spec.d_model + spec.d_ffn) * 2 * spec.n_layers
        need = weights + predictors + 2e9 + 1e9  # CPU + GPU buffers
        assert e.budget == "GPU+CPU"
        assert e.shortfall_bytes == pytest.approx(need - hw.gpu_capacity - hw.cpu_capacity,
                                                  rel=1e-9)
        assert "fits nowhere" in str(e)
    elif name == "all_gpu":
        assert e.budget == "GPU"
    else:  # layer_offload keeps what does not fit on the CPU; all_cpu keeps everything there
        assert e.budget == "CPU"
    assert e.shortfall_bytes > 250e9


def test_c_l_rule_ilp_never_splits_below_minimum_greedy_may(opt13):
    """On pc_low the dense-first plan leaves a small FFN budget; greedy's top-k spreads it
    thinly and lands below C_l in some layers; the ILP never does and loses little."""
    spec, profile = opt13
    greedy = solve(group_config("solver", "greedy"), spec, profile, group_config("hardware", "pc_low"))
    ilp = solve(group_config("solver", "ilp"), spec, profile, group_config("hardware", "pc_low"))
    minimum = ilp.min_gpu_neurons
    assert (minimum > 1).all()
    counts = ilp.gpu_counts
    assert np.all((counts == 0) | (counts >= minimum))  # never in (0, C_l)
    assert ilp.cl_violations == 0
    assert greedy.cl_violations > 0  # this budget makes greedy infeasible w.r.t. C_l
    repaired = ilp.stats.extra["greedy_objective"]
    assert ilp.stats.objective <= repaired + 1e-9  # greedy (ignoring C_l) bounds it above
    assert ilp.stats.extra["bound_gap"] <= 0.01
    assert ilp.stats.gap <= 0.01


@pytest.mark.parametrize("communication", ["off", "dense", "expected"])
def test_ilp_never_below_greedy_when_greedy_is_feasible(opt67, communication):
    spec, profile = opt67
    cfg = dict(communication=communication, dense_gpu_share=0.5)
    greedy = solve(group_config("solver", "greedy", **cfg), spec, profile, group_config("hardware", "pc_low"))
    ilp = solve(group_config("solver", "ilp", **cfg), spec, profile, group_config("hardware", "pc_low"))
    assert ilp.cl_violations == 0
    if greedy.cl_violations == 0:
        assert ilp.stats.objective >= greedy.stats.objective - 1e-9
    if communication == "off":
        assert ilp.stats.objective == pytest.approx(greedy.stats.objective, rel=1e-12)
    # with the communication term the optimum can only fall
    assert ilp.stats.objective <= greedy.stats.objective + 1e-9


def test_dense_parts_go_first_in_layer_order(opt13):
    spec, profile = opt13
    full = solve(group_config("solver", "greedy"), spec, profile, group_config("hardware", "pc_low"))
    half = solve(group_config("solver", "greedy", dense_gpu_share=0.5), spec, profile, group_config("hardware", "pc_low"))
    n_full = sum(d == "gpu" for d in full.attn_device)
    n_half = sum(d == "gpu" for d in half.attn_device)
    assert full.attn_device[:n_full] == ["gpu"] * n_full  # a prefix of layers
    assert 0 < n_half < n_full
    assert half.gpu.ffn > full.gpu.ffn
    assert full.predictor_device == full.attn_device


def test_unified_memory_phone(opt67):
    """oneplus12: one LPDDR5X pool; OPT-6.7B int4 fits in its 19 GB, fp16 does not."""
    spec, profile = opt67
    hw = load_hardware(group_config("hardware", "oneplus12"))
    assert hw.unified
    placement = solve(group_config("solver", "ilp"), spec, profile, hw, weight_dtype="int4", context=512)
    assert placement.gpu.total + placement.cpu.total <= hw.cpu_capacity
    with pytest.raises(PlacementInfeasibleError, match="short by"):
        solve(group_config("solver", "ilp"), spec_from_config(group_config("model", "opt_13b")),
              synthetic_profile(spec_from_config(group_config("model", "opt_13b")),
                                trace_tokens=8), hw, weight_dtype="fp16")


def test_measured_predictor_sizes_are_reserved(opt67):
    spec, profile = opt67
    big = solve(group_config("solver", "greedy"), spec, profile, group_config("hardware", "pc_low"), predictor_bytes=50e6)
    small = solve(group_config("solver", "greedy"), spec, profile, group_config("hardware", "pc_low"), predictor_bytes=1e6)
    assert big.gpu.predictors + big.cpu.predictors == pytest.approx(50e6 * spec.n_layers)
    assert big.gpu.ffn < small.gpu.ffn
