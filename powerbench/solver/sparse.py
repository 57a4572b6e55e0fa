"""What the hot/cold solvers (greedy, ilp) share: the dense-first memory plan, the
communication minimum C_l, the exact neuron-level allocation, and Placement assembly."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from powerbench.hardware.hardware_profile import GB, HardwareProfile
from powerbench.solver.config import CommMode, SparseSolverConfig
from powerbench.solver.placement import (
    CPU,
    GPU,
    DeviceBytes,
    Placement,
    PlacementInfeasibleError,
    SolverStats,
)
from powerbench.solver.problem import (
    ByteModel,
    PlacementProblem,
    check_capacity,
    check_fits_anywhere,
    resolve_context,
)


@dataclass(frozen=True)
class DensePlan:
    """Where the dense parts go, and the byte window left for GPU FFN neurons."""

    attn_gpu: np.ndarray  # bool per layer (attention + its KV cache + its predictor)
    lm_head_gpu: bool
    ffn_gpu_max: float  # bytes of FFN neurons the accelerator can still take
    ffn_gpu_min: float  # bytes of FFN neurons that must leave the CPU (its capacity)


def plan_dense(cfg: SparseSolverConfig, bm: ByteModel, what: str) -> DensePlan:
    """PowerInfer's loader order: buffers, output projection, then each layer's dense part
    (attention, KV cache, predictor) in layer order while it fits within
    `dense_gpu_share` of the accelerator; FFN neurons get what is left."""
    if not 0.0 <= cfg.dense_gpu_share <= 1.0:
        raise ValueError(f"dense_gpu_share must be in [0, 1], got {cfg.dense_gpu_share}")
    check_fits_anywhere(bm, what)
    n = bm.n_layers
    dense = bm.dense_layer
    if not bm.has_gpu:
        return DensePlan(np.zeros(n, dtype=bool), False, 0.0, 0.0)
    if bm.unified:
        # One pool: any split fits once the total does; the accelerator may hold it all.
        avail = bm.cpu_capacity - bm.cpu_buffer - bm.gpu_buffer - bm.embed_in
    else:
        avail = bm.gpu_capacity - bm.gpu_buffer
        if avail < 0:
            raise PlacementInfeasibleError("GPU", bm.gpu_buffer, bm.gpu_capacity,
                                           f"{what}: the GPU cannot even hold its buffers")
    lm_gpu = bool(cfg.lm_head_on_gpu and bm.lm_head <= avail)
    avail -= bm.lm_head if lm_gpu else 0.0
    fits = np.cumsum(dense) <= cfg.dense_gpu_share * avail + 1e-6
    attn_gpu = np.cumsum(~fits) == 0  # a prefix of layers, in order
    used = float(dense[attn_gpu].sum())
    if bm.unified:
        return DensePlan(attn_gpu, lm_gpu, bm.ffn_total, 0.0)
    ffn_gpu_max = max(avail - used, 0.0)
    cpu_fixed = (bm.cpu_buffer + bm.embed_in + (0.0 if lm_gpu else bm.lm_head)
                 + float(dense[~attn_gpu].sum()))
    ffn_gpu_min = max(bm.ffn_total - (bm.cpu_capacity - cpu_fixed), 0.0)
    if ffn_gpu_min > ffn_gpu_max + 1.0:
        raise PlacementInfeasibleError(
            "CPU", cpu_fixed + bm.ffn_total - ffn_gpu_max, bm.cpu_capacity,
            f"{what}: with dense_gpu_share={cfg.dense_gpu_share} the host keeps "
            f"{cpu_fixed / GB:.2f} GB of dense parts and buffers; raise dense_gpu_share")
    return DensePlan(attn_gpu, lm_gpu, ffn_gpu_max, ffn_gpu_min)


def min_gpu_neurons(mode: CommMode | str, neuron_bytes: float, hw: HardwareProfile,
                    t_sync_s: float, mean_frequency: np.ndarray, neurons: int) -> np.ndarray:
    """C_l per layer: the fewest GPU neurons for which the GPU time saved pays for one
    synchronisation, C_l * T_gpu + T_sync <= C_l * T_cpu (design section 5), with
    T_u = M_n / BW_u (`dense`) or scaled by the layer's mean activation frequency
    (`expected`). Where the accelerator saves nothing, C_l = neurons + 1 (layer never split)."""
    mode = CommMode(mode)
    n_layers = len(mean_frequency)
    if mode is CommMode.off or not hw.has_accelerator or t_sync_s <= 0:
        return np.zeros(n_layers, dtype=np.int64)
    saving = neuron_bytes * (1.0 / hw.cpu_bw - 1.0 / float(hw.gpu_bw or math.inf))
    scale = (np.asarray(mean_frequency, dtype=np.float64) if mode is CommMode.expected
             else np.ones(n_layers))
    per_neuron = saving * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(per_neuron > 0, np.ceil(t_sync_s / per_neuron - 1e-9), np.inf)
    return np.minimum(need, neurons + 1).astype(np.int64)


def layer_minimums(cfg: SparseSolverConfig, problem: PlacementProblem,
                   bm: ByteModel) -> np.ndarray:
    t_sync = cfg.t_sync_us * 1e-6 if cfg.t_sync_us is not None else problem.hardware.sync_s
    mean = np.array([f.mean() for f in problem.frequencies])
    return min_gpu_neurons(cfg.communication, bm.neuron_bytes, problem.hardware, t_sync,
                           mean, bm.neurons)


# ---- neuron-level allocation --------------------------------------------------------------
def prefix_sums(problem: PlacementProblem) -> list[np.ndarray]:
    return [np.concatenate([[0.0], np.cumsum(s)]) for s in problem.sorted_frequencies]


def counts_objective(prefix: list[np.ndarray], counts: np.ndarray) -> float:
    return float(sum(p[k] for p, k in zip(prefix, counts, strict=True)))


def allocate(sorted_freqs: list[np.ndarray], budget: int, allowed: np.ndarray,
             minimum: np.ndarray, need: int = 0) -> np.ndarray | None:
    """Exact optimum of: max sum_l prefix_l(k_l) s.t. sum k <= budget, k_l = 0 outside
    `allowed`, k_l >= minimum_l inside, sum k >= need (None if infeasible).

    Each layer's values are sorted descending, so its marginal gains fall: take the
    mandatory minimums, then the globally best remaining neurons (positive ones; zero-value
    ones only as far as `need` demands)."""
    n_layers = len(sorted_freqs)
    sizes = np.array([s.size for s in sorted_freqs])
    allowed = np.asarray(allowed, dtype=bool)
    counts = np.where(allowed, np.asarray(minimum, dtype=np.int64), 0)
    if np.any(counts > sizes) or counts.sum() > budget:
        return None
    rem = int(budget - counts.sum())
    layers = np.flatnonzero(allowed)
    if rem > 0 and layers.size:
        tails = [sorted_freqs[i][counts[i]:] for i in layers]
        values = np.concatenate(tails)
        owner = np.repeat(layers, [t.size for t in tails])
        positive = np.flatnonzero(values > 0)
        if positive.size > rem:
            pick = positive[np.argpartition(-values[positive], rem - 1)[:rem]]
        else:
            pick = positive
        counts += np.bincount(owner[pick], minlength=n_layers)
        short = int(need - counts.sum())
        if short > 0:  # zero-value neurons, only to relieve the CPU
            room = np.where(allowed, sizes - counts, 0)
            for i in layers:
                add = int(min(room[i], short))
                counts[i] += add
                short -= add
                if short <= 0:
                    break
    if counts.sum() < need:
        return None
    return counts


def neuron_budget(plan: DensePlan, bm: ByteModel) -> tuple[int, int]:
    """(max, min) GPU neuron counts from the plan's byte window."""
    hi = int(math.floor(plan.ffn_gpu_max / bm.neuron_bytes + 1e-9))
    lo = int(math.ceil(plan.ffn_gpu_min / bm.neuron_bytes - 1e-9))
    return hi, lo


# ---- assembly -----------------------------------------------------------------------------
def prefix_ids(problem: PlacementProblem, counts: np.ndarray) -> list[np.ndarray]:
    """Per layer: the ids of its `counts[l]` hottest neurons."""
    return [o[:k] for o, k in zip(problem.order, counts, strict=True)]


def sparse_placement(solver: str, cfg: SparseSolverConfig, problem: PlacementProblem,
                     bm: ByteModel, plan: DensePlan, gpu_ids: list[np.ndarray],
                     minimums: np.ndarray, stats: SolverStats) -> Placement:
    attn_gpu = plan.attn_gpu
    n_gpu_ffn = float(sum(ids.size for ids in gpu_ids))
    gpu = DeviceBytes(
        ffn=n_gpu_ffn * bm.neuron_bytes,
        attention=bm.attn * attn_gpu.sum(), kv_cache=bm.kv * attn_gpu.sum(),
        predictors=float(bm.predictor[attn_gpu].sum()),
        embeddings=bm.lm_head if plan.lm_head_gpu else 0.0,
        buffers=bm.gpu_buffer,
    )
    cpu = DeviceBytes(
        ffn=(bm.n_layers * bm.neurons - n_gpu_ffn) * bm.neuron_bytes,
        attention=bm.attn * (~attn_gpu).sum(), kv_cache=bm.kv * (~attn_gpu).sum(),
        predictors=float(bm.predictor[~attn_gpu].sum()),
        embeddings=bm.embed_in + (0.0 if plan.lm_head_gpu else bm.lm_head),
        buffers=bm.cpu_buffer,
    )
    what = f"{solver}: {problem.spec.name} ({problem.weight_dtype.value}) on {problem.hardware.name}"
    check_capacity(gpu, cpu, bm, what)
    devices = [GPU if a else CPU for a in attn_gpu]
    return Placement(
        solver=solver, model=problem.spec.name, hardware=problem.hardware.name,
        weight_dtype=problem.weight_dtype.value, context=resolve_context(cfg, problem),
        neurons_per_layer=bm.neurons,
        gpu_neurons=[np.sort(ids).astype(np.int64) for ids in gpu_ids],
        attn_device=devices, kv_device=list(devices), predictor_device=list(devices),
        embed_device=CPU if bm.embed_in > 0 else (GPU if plan.lm_head_gpu else CPU),
        lm_head_device=GPU if plan.lm_head_gpu else CPU,
        min_gpu_neurons=np.asarray(minimums, dtype=np.int64), gpu=gpu, cpu=cpu, stats=stats,
    )
