"""`solver=pi2_planner`: PowerInfer-2's offline planner for a phone (and the memory plans of
its baselines), from model, hardware and a DRAM budget.

1. Resident parts, always in DRAM: attention, KV cache (solver.context), embeddings and
   output projection, predictors (not for `mmap`), buffers. They must fit the budget, else
   PlacementInfeasibleError names the budget and the shortfall.
2. The rest of the budget holds FFN neurons. All of them fit: no flash. Else
   powerinfer2: the hottest clusters model-wide (by profiled frequency) are pinned
       (`hot_share` of the neuron cache), the rest is an LRU share per layer; the cluster
       size minimises the expected flash read time per token (missed clusters x read time
       of one cluster at its block size, flash_io.FlashRates);
   llmflash: the whole neuron cache is LRU, one neuron per read, gate read apart
       (bundle=up_down);
   mmap: llama.cpp's page cache: the same leading share of every layer stays resident.
3. Cores: decode computes on the fastest CPU clusters whose sustained FLOP/s covers the
   CPU's DRAM bandwidth for the weights' arithmetic intensity (decode is memory-bound, so
   more cores add nothing); flash reads are issued from the fastest core class left over.
Every decision goes to the placement's stats.extra (placement_summary.json) and metrics.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from powerbench.flash.cache import SegmentPlan, plan_segments
from powerbench.hardware.hardware_profile import GB, HardwareProfile
from powerbench.model.spec import bytes_per_param
from powerbench.simulator.flash_io import CORE_CLASSES, FlashRates
from powerbench.simulator.flash_tier import FlashPlan, FlashPolicy
from powerbench.solver.phone_placement import CorePlan, PhonePlacement
from powerbench.solver.pi2_config import Bundle, PI2PlannerConfig, PlanStrategy
from powerbench.solver.placement import CPU, DeviceBytes, PlacementInfeasibleError, SolverStats
from powerbench.solver.problem import ByteModel, PlacementProblem, byte_model, resolve_context


def _predictor_bytes(cfg: PI2PlannerConfig, problem: PlacementProblem) -> np.ndarray:
    spec = problem.spec
    if cfg.strategy is PlanStrategy.mmap:
        return np.zeros(spec.n_layers)
    if problem.predictor_bytes is not None:
        return np.asarray(problem.predictor_bytes, dtype=np.float64)
    params = cfg.predictor_hidden * (spec.d_model + spec.neurons_per_layer)
    return np.full(spec.n_layers, params * bytes_per_param(cfg.predictor_dtype))


def reads_per_neuron(bundle: Bundle, n_matrices: int) -> int:
    if bundle is Bundle.all:
        return 1
    if bundle is Bundle.up_down:
        return max(n_matrices - 1, 1)
    return n_matrices


def core_classes(hw: HardwareProfile) -> list[tuple[str, str, int, float]]:
    """(cluster name, class, cores, sustained FLOP/s) fastest per core first; classes by
    rank: big, mid, little (the rest little). Sustained = peak x the unit's
    effective / peak ratio (1 when the unit gives no effective figure)."""
    unit = hw.cpu
    clusters = [c for c in unit.clusters if c.peak_fp32_flops]
    if not clusters:
        raise ValueError(f"hardware {hw.name!r}: the CPU lists no clusters with FLOP figures")
    peak = sum(c.peak_fp32_flops for c in clusters)
    ratio = (unit.effective_flops / peak) if unit.effective_flops else 1.0
    ordered = sorted(clusters, key=lambda c: -c.peak_fp32_flops / c.cores)
    return [(c.name, CORE_CLASSES[min(i, 2)], c.cores, c.peak_fp32_flops * ratio)
            for i, c in enumerate(ordered)]


def plan_cores(cfg: PI2PlannerConfig, problem: PlacementProblem) -> tuple[CorePlan, str]:
    hw = problem.hardware
    classes = core_classes(hw)
    need = 2.0 / bytes_per_param(problem.weight_dtype) * hw.bandwidth(hw.cpu)
    if cfg.compute_clusters is not None:
        unknown = set(cfg.compute_clusters) - {c[0] for c in classes}
        if unknown:
            raise ValueError(f"solver.compute_clusters {sorted(unknown)} not among "
                             f"{[c[0] for c in classes]} of {hw.name}")
        chosen = [c for c in classes if c[0] in cfg.compute_clusters]
        why = "configured"
    else:
        chosen, flops = [], 0.0
        for c in classes:
            chosen.append(c)
            flops += c[3]
            if flops >= need:
                break
        why = (f"fastest clusters covering {need / 1e9:.0f} GFLOP/s (2 FLOP per "
               f"{bytes_per_param(problem.weight_dtype):.3g} B weight at the CPU's "
               f"{hw.bandwidth(hw.cpu) / 1e9:.1f} GB/s)")
    names = {c[0] for c in chosen}
    idle = [c for c in classes if c[0] not in names]
    io = cfg.io_core or (idle[0][1] if idle else chosen[-1][1])
    if io not in CORE_CLASSES:
        raise ValueError(f"solver.io_core {io!r} is not one of {CORE_CLASSES}")
    plan = CorePlan(tuple(c[0] for c in chosen), float(sum(c[3] for c in chosen)), io,
                    cfg.io_cores)
    return plan, why


def expected_io_s(freq: list[np.ndarray], k: int, capacity_neurons: float, hot_share: float,
                  neuron_bytes: float, reads: int, rates: FlashRates, core: str,
                  issuers: int) -> float:
    """Expected flash seconds per token with clusters of k neurons: per layer, clusters
    outside the pinned set that are active (1 - prod(1 - p)) and miss the LRU (which holds
    its share of the layer's other clusters)."""
    n_layers, n = len(freq), freq[0].size
    units = -(-n // k)
    p = np.stack([np.pad(f, (0, units * k - n)) for f in freq]).reshape(n_layers, units, k)
    active = 1.0 - np.prod(1.0 - np.clip(p, 0.0, 1.0), axis=2)  # [L, units]
    capacity = int(capacity_neurons // k)
    plan = plan_segments(p.sum(axis=2), n_layers, units, capacity, hot_share)
    misses = 0.0
    for i in range(n_layers):
        cold = np.ones(units, dtype=bool)
        cold[plan.hot[i]] = False
        share = plan.lru[i] / max(int(cold.sum()), 1)
        misses += float(active[i, cold].sum()) * (1.0 - share)
    return float(rates.read_time(misses * reads, k * neuron_bytes / reads, core=core,
                                 issuers=issuers))


def _infeasible(cfg: PI2PlannerConfig, budget: float, need: float, bm: ByteModel,
                what: str) -> PlacementInfeasibleError:
    label = (f"DRAM (solver.dram_budget_gb={cfg.dram_budget_gb:g})"
             if cfg.dram_budget_gb is not None else "DRAM (usable)")
    return PlacementInfeasibleError(
        label, need, budget, f"{what}: the resident parts alone (attention, KV, embeddings, "
        f"predictors, buffers) need {need / GB:.2f} GB; the model needs {bm.breakdown()}")


def solve_pi2(cfg: PI2PlannerConfig, problem: PlacementProblem) -> PhonePlacement:
    start = time.perf_counter()
    spec, hw = problem.spec, problem.hardware
    what = (f"pi2_planner ({cfg.strategy.value}): {spec.name} "
            f"({problem.weight_dtype.value}) on {hw.name}")
    bm = replace(byte_model(cfg, problem), predictor=_predictor_bytes(cfg, problem))
    usable = hw.cpu_capacity
    budget = cfg.dram_budget_gb * GB if cfg.dram_budget_gb is not None else usable
    if budget > usable + 1.0:
        raise ValueError(f"solver.dram_budget_gb={cfg.dram_budget_gb:g} exceeds the "
                         f"{usable / GB:.2f} GB usable on {hw.name}")
    gpu = DeviceBytes(buffers=bm.gpu_buffer)
    cpu = DeviceBytes(attention=bm.n_layers * bm.attn, kv_cache=bm.n_layers * bm.kv,
                      embeddings=bm.embed_in + bm.lm_head,
                      predictors=float(bm.predictor.sum()), buffers=bm.cpu_buffer)
    resident = gpu.total + cpu.total
    if resident > budget:
        raise _infeasible(cfg, budget, resident, bm, what)
    free = budget - resident
    capacity = int(min(free // bm.neuron_bytes, bm.n_layers * bm.neurons))
    cpu.ffn = capacity * bm.neuron_bytes
    cores, cores_why = plan_cores(cfg, problem)
    decisions: dict = {"strategy": cfg.strategy.value, "dram_budget_gb": budget / GB,
                       "resident_dense_gb": resident / GB, "neuron_cache_gb": cpu.ffn / GB,
                       "ffn_total_gb": bm.ffn_total / GB,
                       "compute_clusters": list(cores.compute_clusters),
                       "compute_gflops": cores.compute_flops / 1e9, "cores_rule": cores_why,
                       "io_core": cores.io_core, "io_cores": cores.io_cores}
    flash = None
    if capacity < bm.n_layers * bm.neurons:
        flash = _flash_plan(cfg, problem, bm, capacity, cores, decisions)
    else:
        decisions["flash"] = "none: every FFN neuron fits the budget"
    n = bm.n_layers
    empty = np.zeros(0, dtype=np.int64)
    sparse = cfg.strategy is not PlanStrategy.mmap
    return PhonePlacement(
        solver=cfg.name, model=spec.name, hardware=hw.name,
        weight_dtype=problem.weight_dtype.value, context=resolve_context(cfg, problem),
        neurons_per_layer=bm.neurons, gpu_neurons=[empty] * n, attn_device=[CPU] * n,
        kv_device=[CPU] * n, predictor_device=[CPU if sparse else None] * n,
        embed_device=CPU, lm_head_device=CPU, min_gpu_neurons=np.zeros(n, dtype=np.int64),
        gpu=gpu, cpu=cpu,
        stats=SolverStats(solve_time_s=time.perf_counter() - start, gap=0.0,
                          backend="pi2_planner", extra=decisions),
        flash=flash, cores=cores, dram_budget_bytes=budget,
        resident_ffn_share=capacity / (bm.n_layers * bm.neurons))


def _flash_plan(cfg: PI2PlannerConfig, problem: PlacementProblem, bm: ByteModel,
                capacity: int, cores: CorePlan, decisions: dict) -> FlashPlan:
    spec, hw = problem.spec, problem.hardware
    n_layers, n = bm.n_layers, bm.neurons
    n_matrices = spec.ffn_kind.n_matrices
    if cfg.strategy is PlanStrategy.mmap:
        per_layer = capacity // n_layers
        seg = SegmentPlan(hot=tuple(np.arange(per_layer) for _ in range(n_layers)),
                          lru=(0,) * n_layers)
        decisions["flash"] = (f"mmap: first {per_layer} of {n} neurons per layer stay in "
                              f"the page cache; the rest is paged in every token in "
                              f"{cfg.mmap_block_kb:g} KB reads")
        return FlashPlan(FlashPolicy.mmap, 1, seg, bm.neuron_bytes, 1,
                         cfg.mmap_block_kb * 1024.0, cores.io_core, cores.io_cores,
                         cfg.warm_tokens)
    rates = FlashRates.from_hardware(hw)
    freq = problem.frequencies
    llmflash = cfg.strategy is PlanStrategy.llmflash
    hot_share = 0.0 if llmflash else cfg.hot_share
    bundle = Bundle.up_down if llmflash and cfg.bundle is Bundle.all else cfg.bundle
    reads = reads_per_neuron(bundle, n_matrices)
    if llmflash:
        k, scores = 1, {}
    elif cfg.cluster_neurons is not None:
        k, scores = int(cfg.cluster_neurons), {}
    else:
        scores = {c: expected_io_s(freq, c, capacity, hot_share, bm.neuron_bytes, reads,
                                   rates, cores.io_core, cores.io_cores)
                  for c in cfg.cluster_candidates}
        k = min(scores, key=scores.get)
    units = -(-n // k)
    pad = units * k - n
    per_unit = np.stack([np.pad(f, (0, pad)) for f in freq]).reshape(n_layers, units, k)
    seg = plan_segments(per_unit.sum(axis=2), n_layers, units, capacity // k, hot_share)
    decisions.update({
        "flash": f"{cfg.strategy.value}: {seg.n_hot} hot clusters pinned, "
                 f"{sum(seg.lru)} LRU slots, {k} neurons per cluster, {reads} read(s) "
                 f"per cluster ({bundle.value} bundling)",
        "cluster_neurons": k, "expected_io_ms_by_cluster": {c: s * 1e3
                                                            for c, s in scores.items()},
        "hot_share": hot_share, "bundle": bundle.value})
    return FlashPlan(FlashPolicy.segmented, k, seg, bm.neuron_bytes, reads,
                     io_core=cores.io_core, io_cores=cores.io_cores,
                     warm_tokens=cfg.warm_tokens)
