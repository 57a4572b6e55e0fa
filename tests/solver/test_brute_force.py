"""Tiny instances: the solvers against exhaustive enumeration of every neuron subset."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from powerbench.config import group_config
from powerbench.solver import solve
from powerbench.solver.config import GreedyConfig, ILPConfig
from powerbench.solver.lagrange import lagrangian_heuristic
from powerbench.solver.problem import PlacementProblem
from powerbench.solver.sparse import min_gpu_neurons, prefix_sums

from .conftest import BARE, machine, random_profile, tiny_spec

NEURON = 32.0  # bytes of one tiny_spec neuron in fp16
CPU_FIXED = 2176.0  # attention 3 x 512 + KV 3 x 128 + tied embeddings 256 (all on the CPU)


def brute_force(freqs: np.ndarray, cap: int, minimum: np.ndarray, need: int = 0) -> float:
    """Best sum of frequencies over all neuron subsets with <= cap neurons, >= need
    neurons, and per layer either none or at least minimum[l]."""
    n_layers, k = freqs.shape
    bits = np.array(list(itertools.product([0, 1], repeat=n_layers * k)), dtype=bool)
    per_layer = bits.reshape(-1, n_layers, k).sum(axis=2)
    total = per_layer.sum(axis=1)
    ok = (total <= cap) & (total >= need)
    ok &= np.all((per_layer == 0) | (per_layer >= minimum[None, :]), axis=1)
    values = bits.astype(np.float64) @ freqs.ravel()
    return float(values[ok].max()) if ok.any() else -np.inf


def t_sync_for(c_l: int, cpu_bw: float = 1e9, gpu_bw: float = 1e12) -> float:
    """A sync cost (us) whose C_l is c_l (2.5 neurons' saving -> C_l = 3)."""
    saving = NEURON * (1 / cpu_bw - 1 / gpu_bw)
    return (c_l - 0.5) * saving * 1e6


CASES = [(seed, cap, c_l) for seed in range(3) for cap in (3, 7, 11) for c_l in (0, 3)]


@pytest.mark.parametrize(("seed", "cap", "c_l"), CASES)
def test_ilp_and_greedy_match_brute_force(seed, cap, c_l):
    spec = tiny_spec()
    profile = random_profile(spec, seed)
    hw = machine(gpu_bytes=cap * NEURON, cpu_bytes=1e6)
    comm = dict(communication="dense", t_sync_us=t_sync_for(c_l)) if c_l else dict(
        communication="off")
    freqs = profile.frequencies()

    exact = solve(ILPConfig(group_size=1, refine=False, mip_gap=1e-9, warm_start=False,
                            **BARE, **comm), spec, profile, hw)
    minimum = exact.min_gpu_neurons
    assert (minimum == c_l).all()
    best = brute_force(freqs, cap, minimum)
    assert exact.stats.objective == pytest.approx(best, abs=1e-9)
    assert exact.cl_violations == 0
    assert exact.gpu_counts.sum() <= cap

    grouped = solve(ILPConfig(group_size=2, refine=False, mip_gap=1e-9, **BARE, **comm),
                    spec, profile, hw)
    refined = solve(ILPConfig(group_size=2, refine=True, mip_gap=1e-9, **BARE, **comm),
                    spec, profile, hw)
    assert grouped.stats.objective <= best + 1e-9
    assert grouped.stats.objective - 1e-9 <= refined.stats.objective <= best + 1e-9
    assert refined.cl_violations == 0

    greedy = solve(GreedyConfig(**BARE, **comm), spec, profile, hw)
    topk = brute_force(freqs, cap, np.zeros(3, dtype=np.int64))
    assert greedy.stats.objective == pytest.approx(topk, abs=1e-9)  # exact without C_l
    if greedy.cl_violations == 0:  # greedy is feasible for the ILP: never below it
        assert refined.stats.objective >= greedy.stats.objective - 1e-9
    if c_l == 0:
        assert refined.stats.objective == pytest.approx(greedy.stats.objective, abs=1e-9)
    # realised objective is what the placement holds
    realised = sum(freqs[i, ids].sum() for i, ids in enumerate(refined.gpu_neurons))
    assert realised == pytest.approx(refined.stats.objective, abs=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_cpu_capacity_forces_neurons_onto_the_gpu(seed):
    """The CPU holds all but 5 neurons' bytes: every solver must place >= 5 on the GPU."""
    spec = tiny_spec()
    profile = random_profile(spec, seed)
    hw = machine(gpu_bytes=9 * NEURON, cpu_bytes=CPU_FIXED + 10 * NEURON)
    comm = dict(communication="dense", t_sync_us=t_sync_for(3))
    exact = solve(ILPConfig(group_size=1, refine=False, mip_gap=1e-9, **BARE, **comm),
                  spec, profile, hw)
    best = brute_force(profile.frequencies(), 9, exact.min_gpu_neurons, need=5)
    assert exact.stats.objective == pytest.approx(best, abs=1e-9)
    for placement in (exact, solve(GreedyConfig(**BARE, **comm), spec, profile, hw)):
        assert placement.gpu_counts.sum() >= 5
        assert placement.cpu.total <= hw.cpu_capacity + 1e-6


@pytest.mark.parametrize("seed", range(3))
def test_scip_backend_matches(seed):
    spec = tiny_spec()
    profile = random_profile(spec, seed)
    hw = machine(gpu_bytes=7 * NEURON, cpu_bytes=1e6)
    comm = dict(communication="dense", t_sync_us=t_sync_for(3))
    placement = solve(ILPConfig(backend="scip", group_size=1, refine=False, mip_gap=0.0,
                                **BARE, **comm), spec, profile, hw)
    best = brute_force(profile.frequencies(), 7, placement.min_gpu_neurons)
    assert placement.stats.objective == pytest.approx(best, abs=1e-9)
    assert placement.stats.backend == "scip"


@pytest.mark.parametrize(("seed", "cap"), [(s, c) for s in range(4) for c in (3, 6, 10)])
def test_lagrangian_bound_and_heuristic_bracket_the_optimum(seed, cap):
    spec = tiny_spec()
    profile = random_profile(spec, seed)
    problem = PlacementProblem(spec=spec, profile=profile, hardware=machine(1.0, 1e6))
    minimum = np.full(3, 3, dtype=np.int64)
    lag = lagrangian_heuristic(problem.sorted_frequencies, prefix_sums(problem), minimum, cap)
    best = brute_force(profile.frequencies(), cap, minimum)
    assert lag.upper_bound >= best - 1e-9
    assert lag.objective <= best + 1e-9
    if lag.counts is not None:
        assert lag.counts.sum() <= cap
        assert np.all((lag.counts == 0) | (lag.counts >= 3))


def test_c_l_formula_matches_design_rule():
    """C_l is the smallest C with C * T_gpu + T_sync <= C * T_cpu."""
    from powerbench.hardware import load_hardware

    hw = load_hardware(group_config("hardware", "pc_high"))
    spec = tiny_spec(d_model=7168)
    m = spec.neuron_bytes("fp16")
    for mode, mean in (("dense", 1.0), ("expected", 0.03)):
        c = int(min_gpu_neurons(mode, m, hw, hw.sync_s, np.array([mean]), 10**9)[0])
        t_cpu, t_gpu = mean * m / hw.cpu_bw, mean * m / hw.gpu_bw
        assert c * t_gpu + hw.sync_s <= c * t_cpu * (1 + 1e-12)
        assert (c - 1) * t_gpu + hw.sync_s > (c - 1) * t_cpu
    # an accelerator no faster than the CPU never pays for a sync: the layer is never split
    slow = machine(1.0, 1.0, cpu_bw=1e9, gpu_bw=1e9)
    assert min_gpu_neurons("dense", m, slow, 1e-5, np.array([1.0]), 100)[0] == 101
    assert min_gpu_neurons("off", m, hw, 1e-5, np.array([1.0]), 100)[0] == 0
