"""`solver=pi2_planner`: PowerInfer-2's offline planner for a phone (and the memory plans of
its baselines), from model, hardware and a DRAM budget.

1. Resident parts, always in DRAM: attention, KV cache (solver.context), embeddings and
   output projection, predictors (not for `mmap`), buffers. They must fit the budget, else
   PlacementInfeasibleError names the budget and the shortfall.
2. The rest of the budget holds FFN neurons. All of them fit: no flash. Else
   powerinfer2: the hottest clusters model-wide (by profiled frequency) are pinned
       (`hot_share` of the neuron cache), the rest is an LRU share per layer; the cluster
       size and the I/O core are chosen together: the least estimated token time
       (pi2_cores: compute vs expected missed clusters x read time at that block size
       from that core class, flash_io.FlashRates);
   llmflash: the whole neuron cache is LRU, one neuron per read, gate read apart
       (bundle=up_down);
   mmap: llama.cpp's page cache: one LRU over all layers of `mmap_block_kb` blocks
       (replayed per token by the simulator, powerbench.simulator.page_cache); misses are
       page faults taken by the compute threads themselves (flash_tier.mmap_bandwidth):
       all compute cores issue, at the class most of them are, `fault_seconds` each.
3. Cores (powerbench.solver.pi2_cores): decode computes on the fastest CPU clusters whose
   sustained FLOP/s covers the CPU's DRAM bandwidth for the weights' arithmetic intensity
   (decode is memory-bound, so more cores add nothing); flash reads are issued from an idle
   core or one taken from the compute set, whichever gives the least estimated token time.
Every decision goes to the placement's stats.extra (placement_summary.json) and metrics.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from powerbench.hardware.flash_rates import FlashRates
from powerbench.hardware.hardware_profile import GB
from powerbench.solver.flash_plan import FlashPlan, FlashPolicy
from powerbench.solver.neuron_cache import SegmentPlan, plan_segments
from powerbench.solver.phone_placement import CorePlan, PhonePlacement
from powerbench.solver.pi2_config import Bundle, PI2PlannerConfig, PlanStrategy
from powerbench.solver.pi2_cores import (
    ComputeSet,
    IOOption,
    compute_set,
    io_options,
    token_seconds,
)
from powerbench.solver.placement import CPU, DeviceBytes, PlacementInfeasibleError, SolverStats
from powerbench.solver.problem import (
    ByteModel,
    PlacementProblem,
    byte_model,
    layer_predictor_bytes,
    resolve_context,
)


def _predictor_bytes(cfg: PI2PlannerConfig, problem: PlacementProblem) -> np.ndarray:
    if cfg.strategy is PlanStrategy.mmap:  # llama.cpp: dense, no predictors
        return np.zeros(problem.spec.n_layers)
    return layer_predictor_bytes(problem, cfg.predictor_hidden, cfg.predictor_dtype)


def reads_per_neuron(bundle: Bundle, n_matrices: int) -> int:
    if bundle is Bundle.all:
        return 1
    if bundle is Bundle.up_down:
        return max(n_matrices - 1, 1)
    return n_matrices


def expected_misses(freq: list[np.ndarray], k: int, capacity_neurons: float,
                    hot_share: float) -> float:
    """Expected clusters of k neurons read from flash per token: per layer, clusters
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
    return misses


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
    gpu = DeviceBytes(buffers=bm.gpu_buffer)
    cpu = DeviceBytes(attention=bm.n_layers * bm.attn, kv_cache=bm.n_layers * bm.kv,
                      embeddings=bm.embed_in + bm.lm_head,
                      predictors=float(bm.predictor.sum()), buffers=bm.cpu_buffer)
    if cfg.ffn_offload_fraction is not None:
        budget = (gpu.total + cpu.total - cpu.predictors
                  + (1.0 - cfg.ffn_offload_fraction) * bm.ffn_total)
    if budget > usable + 1.0:
        if cfg.ffn_offload_fraction is not None:  # a setting this phone cannot hold
            raise PlacementInfeasibleError(
                "DRAM (usable)", budget, usable,
                f"{what}: {1 - cfg.ffn_offload_fraction:.0%} of the FFN + the dense parts "
                f"need {budget / GB:.2f} GB, {hw.name} has {usable / GB:.2f} GB usable")
        raise ValueError(f"solver.dram_budget_gb={cfg.dram_budget_gb:g} exceeds the "
                         f"{usable / GB:.2f} GB usable on {hw.name}")
    resident = gpu.total + cpu.total
    if resident > budget:
        raise _infeasible(cfg, budget, resident, bm, what)
    free = budget - resident
    capacity = int(min(free // bm.neuron_bytes, bm.n_layers * bm.neurons))
    cpu.ffn = capacity * bm.neuron_bytes
    compute = compute_set(cfg, problem)
    options = io_options(cfg, hw, compute)
    decisions: dict = {"strategy": cfg.strategy.value, "dram_budget_gb": budget / GB,
                       "resident_dense_gb": resident / GB, "neuron_cache_gb": cpu.ffn / GB,
                       "ffn_total_gb": bm.ffn_total / GB,
                       "compute_clusters": [c.name for c in compute.clusters],
                       "cores_rule": compute.why, "io_cores": cfg.io_cores}
    flash = None
    if capacity < bm.n_layers * bm.neurons:
        flash, io = _flash_plan(cfg, problem, bm, capacity, compute, options, decisions)
    else:
        io = max(options, key=lambda o: o.compute_flops)  # no reads: lose no compute
        decisions["flash"] = "none: every FFN neuron fits the budget"
    cores = CorePlan(tuple(c.name for c in compute.clusters), io.compute_flops,
                     io.core_class, flash.io_cores if flash is not None else cfg.io_cores,
                     io_flops=compute.flops - io.compute_flops if flash is not None else 0.0)
    decisions |= {"io_core": io.core_class, "io_core_placement": io.label,
                  "compute_gflops": io.compute_flops / 1e9}
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


def fault_seconds(cfg: PI2PlannerConfig) -> float:
    """Kernel time one mmap readahead window costs its faulting thread: one major fault
    (which issues the window's read) + minor faults mapping the rest of the window
    (fault-around maps `mmap_fault_around_kb` per fault). Constants: conf/solver."""
    around = max(cfg.mmap_block_kb / cfg.mmap_fault_around_kb, 1.0)
    return (cfg.mmap_major_fault_us + (around - 1.0) * cfg.mmap_minor_fault_us) * 1e-6


def compute_seconds(cfg: PI2PlannerConfig, problem: PlacementProblem, bm: ByteModel
                    ) -> tuple[float, float]:
    """The planner's estimate of a token's DRAM time at full bandwidth, (attention + output
    projection + predictors, the FFN bytes a token computes) (sparse: the profiled
    frequencies; mmap, dense: every neuron of the routed experts). Not the simulator's
    cost: no kernel efficiencies, no per-call overheads."""
    spec = problem.spec
    if cfg.strategy is PlanStrategy.mmap:
        ffn = bm.ffn_total * spec.experts_per_token / max(spec.n_experts, 1)
    else:
        ffn = float(sum(f.sum() for f in problem.frequencies)) * bm.neuron_bytes
    # MoE: per-expert predictors, a token runs its routed experts' only (as simulator=phone)
    pred = float(bm.predictor.sum()) * spec.experts_per_token / max(spec.n_experts, 1)
    bw = problem.hardware.bandwidth(problem.hardware.cpu)
    return (bm.n_layers * bm.attn + bm.lm_head + pred) / bw, ffn / bw


def _flash_plan(cfg: PI2PlannerConfig, problem: PlacementProblem, bm: ByteModel,
                capacity: int, compute: ComputeSet, options: list[IOOption],
                decisions: dict) -> tuple[FlashPlan, IOOption]:
    spec, hw = problem.spec, problem.hardware
    n_layers, n = bm.n_layers, bm.neurons
    n_matrices = spec.ffn_kind.n_matrices
    if cfg.strategy is PlanStrategy.mmap:
        # llama.cpp's reads are page faults taken by its compute threads: every compute
        # core issues (one synchronous read each), no core is given up to I/O
        threads = sum(c.cores for c in compute.clusters)
        major = max(compute.clusters, key=lambda c: c.cores).core_class
        io = IOOption(major, None, compute.flops)
        fault = fault_seconds(cfg)
        block = cfg.mmap_block_kb * 1024.0
        per_block = max(1, int(round(block / bm.neuron_bytes)))
        pages = capacity // per_block
        units = n_layers * -(-n // per_block)
        seg = SegmentPlan(hot=tuple(np.zeros(0, dtype=np.int64) for _ in range(n_layers)),
                          lru=(0,) * n_layers)
        decisions["flash"] = (f"mmap: an LRU page cache of {pages} of {units} blocks "
                              f"({per_block} neurons, {cfg.mmap_block_kb:g} KB readahead) "
                              f"over all layers; misses are page faults of the {threads} "
                              f"compute threads ({major} class, queue depth 1 each, "
                              f"{fault * 1e6:.1f} us kernel time per window)")
        decisions["fault_threads"] = threads
        return FlashPlan(FlashPolicy.mmap, per_block, seg, bm.neuron_bytes, 1, block,
                         io.core_class, threads, cfg.warm_tokens,
                         page_cache_units=pages, fault_s=fault), io
    rates = FlashRates.from_hardware(hw)
    freq = problem.frequencies
    llmflash = cfg.strategy is PlanStrategy.llmflash
    hot_share = 0.0 if llmflash else cfg.hot_share
    bundle = Bundle.up_down if llmflash and cfg.bundle is Bundle.all else cfg.bundle
    reads = reads_per_neuron(bundle, n_matrices)
    if llmflash:
        sizes = [1]
    elif cfg.cluster_neurons is not None:
        sizes = [int(cfg.cluster_neurons)]
    else:
        sizes = list(cfg.cluster_candidates)
    t_c = compute_seconds(cfg, problem, bm)
    pipelined = cfg.strategy is PlanStrategy.powerinfer2
    scores: dict[tuple[int, str], tuple[float, float]] = {}  # (k, io) -> (io s, token s)
    for k in sizes:
        misses = expected_misses(freq, k, capacity, hot_share)
        for opt in options:
            io_s = float(rates.read_time(misses * reads, k * bm.neuron_bytes / reads,
                                         core=opt.core_class, issuers=cfg.io_cores))
            scores[(k, opt.label)] = (io_s, token_seconds(
                t_c, compute.need_flops, compute.flops, opt.compute_flops, io_s, pipelined))
    k, label = min(scores, key=lambda key: scores[key][1])
    io = next(o for o in options if o.label == label)
    units = -(-n // k)
    pad = units * k - n
    per_unit = np.stack([np.pad(f, (0, pad)) for f in freq]).reshape(n_layers, units, k)
    seg = plan_segments(per_unit.sum(axis=2), n_layers, units, capacity // k, hot_share)
    decisions.update({
        "flash": f"{cfg.strategy.value}: {seg.n_hot} hot clusters pinned, "
                 f"{sum(seg.lru)} LRU slots, {k} neurons per cluster, {reads} read(s) "
                 f"per cluster ({bundle.value} bundling); reads from {io.label}",
        "cluster_neurons": k, "hot_share": hot_share, "bundle": bundle.value,
        "expected_io_ms_by_cluster": {c: scores[(c, label)][0] * 1e3 for c in sizes},
        "token_ms_estimate": {f"k={c} io={o.label}": scores[(c, o.label)][1] * 1e3
                              for c in sizes for o in options},
        "io_core_rule": (f"least estimated token time over I/O core options and cluster "
                         f"sizes ({'max' if pipelined else 'sum'} of compute "
                         f"{sum(t_c) * 1e3:.1f} ms at full FLOP/s, the I/O core lost to "
                         f"the FFN only, and flash reads)")})
    return FlashPlan(FlashPolicy.segmented, k, seg, bm.neuron_bytes, reads,
                     io_core=io.core_class, io_cores=cfg.io_cores,
                     warm_tokens=cfg.warm_tokens), io
