"""solver=pi2_planner: the DRAM budget is respected, an infeasible budget fails naming the
budget and the shortfall, the decisions are recorded."""

from __future__ import annotations

import pytest

from powerbench.config import group_config
from powerbench.hardware import load_hardware
from powerbench.model.loading import spec_from_config
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.solver import PlacementInfeasibleError, solve


@pytest.fixture(scope="module")
def bamboo():
    spec = spec_from_config(group_config("model", "bamboo_7b"))
    return spec, synthetic_profile(spec, trace_tokens=8), load_hardware(
        group_config("hardware", "oneplus12"))


@pytest.mark.parametrize("strategy", ["powerinfer2", "llmflash", "mmap"])
@pytest.mark.parametrize("budget", [4.5, 5.5])
def test_planner_respects_the_dram_budget(bamboo, strategy, budget):
    spec, profile, hw = bamboo
    cfg = group_config("solver", "pi2_planner", strategy=strategy, dram_budget_gb=budget,
                       cluster_candidates=[1, 4])
    p = solve(cfg, spec, profile, hw, weight_dtype="int4", context=192)
    assert p.cpu.total + p.gpu.total <= budget * 1e9 + 1.0
    assert p.flash is not None and 0.0 < p.resident_ffn_share < 1.0
    assert p.stats.extra["strategy"] == strategy and "flash" in p.stats.extra
    metrics = p.metrics(profile)
    assert metrics["pi2_dram_budget_gb"] == pytest.approx(budget)
    assert metrics["pi2_dram_used_gb"] <= budget + 1e-9
    if strategy == "llmflash":
        assert p.flash.segments.n_hot == 0 and p.flash.reads_per_neuron == 2
    if strategy == "powerinfer2":
        assert p.flash.segments.n_hot > 0 and p.flash.reads_per_neuron == 1
    if strategy == "mmap":  # page faults on the 6 compute threads (1 X4 + 5 A720: mid)
        assert p.flash.io_cores == p.cores.io_cores == 6 and p.flash.io_core == "mid"
        # one major fault (5 us) + one fault-around minor fault (1 us) per 128 KB window
        assert p.flash.fault_s == pytest.approx(6e-6)
        assert p.cores.compute_flops == pytest.approx(52.7e9 + 119.8e9, rel=0.01)


def test_whole_model_fits_no_flash_and_decode_cores_cover_bandwidth(bamboo):
    spec, profile, hw = bamboo
    p = solve(group_config("solver", "pi2_planner", strategy="mmap"), spec, profile, hw,
              weight_dtype="int4", context=192)
    assert p.flash is None and p.resident_ffn_share == 1.0
    # 2 FLOP per 18/32 B weight at 43.9 GB/s = 156 GFLOP/s: the X4 and the five A720s
    assert p.cores.compute_clusters == ("prime_x4", "perf_a720")
    assert p.cores.io_core == "little"


def test_infeasible_budget_names_budget_and_shortfall(bamboo):
    spec, profile, hw = bamboo
    cfg = group_config("solver", "pi2_planner", dram_budget_gb=1.0)
    with pytest.raises(PlacementInfeasibleError,
                       match=r"solver.dram_budget_gb=1\).*short by") as err:
        solve(cfg, spec, profile, hw, weight_dtype="int4", context=192)
    assert err.value.available_bytes == 1e9 and err.value.shortfall_bytes > 0
    assert "resident parts alone" in str(err.value)
    with pytest.raises(ValueError, match="exceeds"):
        solve(group_config("solver", "pi2_planner", dram_budget_gb=30.0), spec, profile, hw,
              weight_dtype="int4")


def test_io_core_is_chosen_from_flash_and_compute_estimates(bamboo):
    """Every (cluster size, I/O core option) gets a token estimate; the plan takes the
    least; an I/O core taken from a computing cluster lowers the decode FLOP/s."""
    spec, profile, hw = bamboo
    cfg = group_config("solver", "pi2_planner", dram_budget_gb=4.5, cluster_candidates=[1, 4])
    p = solve(cfg, spec, profile, hw, weight_dtype="int4", context=192)
    est = p.stats.extra["token_ms_estimate"]
    assert set(est) == {f"k={k} io={o}" for k in (1, 4) for o in
                        ("big (from prime_x4)", "mid (from perf_a720)", "little (idle)")}
    best = min(est, key=est.get)
    assert best == f"k={p.flash.cluster_neurons} io={p.stats.extra['io_core_placement']}"
    assert p.flash.io_core == p.cores.io_core == p.stats.extra["io_core"]
    full = 52.7e9 + 119.8e9  # sustained X4 + five A720s (0.19 / 0.38 TFLOP/s of peak)
    lost = {"big": 52.7e9, "mid": 119.8e9 / 5, "little": 0.0}[p.cores.io_core]
    assert p.cores.compute_flops == pytest.approx(full - lost, rel=0.01)
    # the I/O core is lost to the FFN's read phase only; the rest of a token has it
    assert p.cores.io_flops == pytest.approx(lost, rel=0.01, abs=1.0)
    # fixed to the little core: no compute lost, the slower 4 KB reads
    little = solve(group_config("solver", "pi2_planner", dram_budget_gb=4.5,
                                cluster_candidates=[1, 4], io_core="little"),
                   spec, profile, hw, weight_dtype="int4", context=192)
    assert little.cores.io_core == "little" and little.cores.compute_flops == pytest.approx(
        full, rel=0.01)
    assert little.cores.io_flops == 0.0
    assert set(little.stats.extra["token_ms_estimate"]) == {"k=1 io=little (idle)",
                                                             "k=4 io=little (idle)"}
    with pytest.raises(ValueError, match="io_core 'huge'"):
        solve(group_config("solver", "pi2_planner", dram_budget_gb=4.5, io_core="huge"),
              spec, profile, hw, weight_dtype="int4", context=192)


def test_ffn_offload_fraction_gives_every_strategy_the_same_budget(bamboo):
    """solver.ffn_offload_fraction=0.5: the dense parts + half of the FFN's bytes, the same
    budget for every strategy (PowerInfer-2's predictors come out of it); llama.cpp then
    holds half of the FFN, PowerInfer-2 a little less."""
    spec, profile, hw = bamboo
    plans = {s: solve(group_config("solver", "pi2_planner", strategy=s,
                                   ffn_offload_fraction=0.5, cluster_candidates=[1, 4]),
                      spec, profile, hw, weight_dtype="int4", context=192)
             for s in ("powerinfer2", "mmap")}
    budgets = {s: p.dram_budget_bytes for s, p in plans.items()}
    assert budgets["powerinfer2"] == pytest.approx(budgets["mmap"])
    assert plans["mmap"].resident_ffn_share == pytest.approx(0.5, abs=0.01)
    assert 0.0 < plans["powerinfer2"].resident_ffn_share < 0.5
    with pytest.raises(ValueError, match="not both"):
        group_config("solver", "pi2_planner", ffn_offload_fraction=0.5, dram_budget_gb=4.0)
    with pytest.raises(PlacementInfeasibleError, match="FFN"):  # more than the phone holds
        solve(group_config("solver", "pi2_planner", ffn_offload_fraction=0.0), spec, profile,
              load_hardware(group_config("hardware", "oneplus_ace2")), weight_dtype="int4",
              context=10 ** 6)
