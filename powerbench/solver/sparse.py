"""What the hot/cold solvers (greedy, ilp) share: the dense-part memory plans (`first`:
dense parts before any neuron; `impact`: dense parts as items that compete with neurons by
impact per byte), the communication minimum C_l, the exact neuron-level allocation, and
Placement assembly."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from powerbench.hardware.hardware_profile import GB, HardwareProfile
from powerbench.solver.config import CommMode, DensePolicy, SparseSolverConfig
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

    attn_gpu: np.ndarray  # bool per layer (attention + its KV cache [+ its predictor])
    lm_head_gpu: bool
    ffn_gpu_max: float  # bytes of FFN neurons the accelerator can still take
    ffn_gpu_min: float  # bytes of FFN neurons that must leave the CPU (its capacity)
    predictor_gpu: np.ndarray | None = None  # bool per layer; None: with its attention
    dense_value: float = 0.0  # impact policy: the GPU dense parts' value (neuron-equivalents)

    @property
    def pred_gpu(self) -> np.ndarray:
        return self.attn_gpu if self.predictor_gpu is None else self.predictor_gpu


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


# ---- impact policy: dense parts as knapsack items -----------------------------------------
ATTN, PREDICTOR, LM_HEAD = 0, 1, 2


@dataclass(frozen=True)
class DenseItems:
    """The dense parts as GPU-or-CPU items (impact policy). Values are in the unit of the
    FFN objective, neuron-equivalents: the bytes an item has read per token divided by M_n
    (a neuron of activation frequency f is worth f), so item value x M_n x
    (1/BW_cpu - 1/BW_gpu) is the time a token saves when the item is on the accelerator.

    kind: ATTN (a layer's attention weights + its KV cache; value: weights + the KV bytes
    read per token), PREDICTOR (a layer's predictor, read every token), LM_HEAD."""

    kind: np.ndarray
    layer: np.ndarray  # -1 for the output projection
    nbytes: np.ndarray
    value: np.ndarray
    neuron_bytes: float  # M_n

    @property
    def n(self) -> int:
        return int(self.kind.size)

    @property
    def density(self) -> np.ndarray:
        """Value per M_n bytes (1.0: read every token), comparable with a neuron's
        activation frequency."""
        return self.value * self.neuron_bytes / np.maximum(self.nbytes, 1e-300)


@dataclass(frozen=True)
class ImpactWindow:
    """Bytes the accelerator offers all movable items (dense parts + FFN neurons), and the
    fewest it must take so that the host holds the rest."""

    gpu_max: float
    gpu_min: float


def impact_applies(cfg: SparseSolverConfig, bm: ByteModel) -> bool:
    """The impact policy needs two separate memories; with one shared pool (or no
    accelerator) any split fits, so it falls back to the `first` plan."""
    return DensePolicy(cfg.dense_policy) is DensePolicy.impact and bm.has_gpu and not bm.unified


def dense_items(cfg: SparseSolverConfig, bm: ByteModel, context: int) -> DenseItems:
    n = bm.n_layers
    read_tokens = context if cfg.kv_read_tokens is None else min(int(cfg.kv_read_tokens),
                                                                  context)
    kv_read = bm.kv * (read_tokens / context if context > 0 else 0.0)
    kind = [np.full(n, ATTN)]
    layer = [np.arange(n)]
    nbytes = [np.full(n, bm.attn + bm.kv)]
    value = [np.full(n, bm.attn + kv_read)]
    pred = np.flatnonzero(bm.predictor > 0)
    kind.append(np.full(pred.size, PREDICTOR))
    layer.append(pred)
    nbytes.append(bm.predictor[pred])
    value.append(bm.predictor[pred])
    if cfg.lm_head_on_gpu and bm.lm_head > 0:
        kind.append(np.array([LM_HEAD]))
        layer.append(np.array([-1]))
        nbytes.append(np.array([bm.lm_head]))
        value.append(np.array([bm.lm_head]))
    return DenseItems(np.concatenate(kind).astype(np.int64),
                      np.concatenate(layer).astype(np.int64),
                      np.concatenate(nbytes).astype(np.float64),
                      np.concatenate(value).astype(np.float64) / bm.neuron_bytes,
                      bm.neuron_bytes)


def impact_window(bm: ByteModel, items: DenseItems, what: str) -> ImpactWindow:
    check_fits_anywhere(bm, what)
    gpu_max = bm.gpu_capacity - bm.gpu_buffer
    if gpu_max < 0:
        raise PlacementInfeasibleError("GPU", bm.gpu_buffer, bm.gpu_capacity,
                                       f"{what}: the GPU cannot even hold its buffers")
    # lm_head_on_gpu=false: the output projection is no item, it stays on the host
    fixed_cpu = bm.cpu_buffer + bm.embed_in + (0.0 if np.any(items.kind == LM_HEAD)
                                               else bm.lm_head)
    movable = bm.ffn_total + float(items.nbytes.sum())
    gpu_min = max(movable - (bm.cpu_capacity - fixed_cpu), 0.0)
    if gpu_min > gpu_max + 1.0:
        raise PlacementInfeasibleError("GPU+CPU", gpu_min, gpu_max,
                                       f"{what}: the host cannot hold what the GPU cannot")
    return ImpactWindow(gpu_max, gpu_min)


def plan_from_items(bm: ByteModel, items: DenseItems, chosen: np.ndarray,
                    window: ImpactWindow) -> DensePlan | None:
    """The DensePlan of the dense items in `chosen` (None: the bytes do not fit)."""
    chosen = np.asarray(chosen, dtype=bool)
    n = bm.n_layers
    attn_gpu = np.zeros(n, dtype=bool)
    attn_gpu[items.layer[chosen & (items.kind == ATTN)]] = True
    pred_gpu = attn_gpu.copy()  # layers without a predictor item: with the attention
    pred_layers = items.kind == PREDICTOR
    pred_gpu[items.layer[pred_layers]] = chosen[pred_layers]
    lm_gpu = bool(np.any(chosen & (items.kind == LM_HEAD)))
    used = float(items.nbytes[chosen].sum())
    ffn_max = window.gpu_max - used
    ffn_min = max(window.gpu_min - used, 0.0)
    if ffn_max < -1.0 or ffn_min > ffn_max + 1.0 or ffn_min > bm.ffn_total + 1.0:
        return None
    return DensePlan(attn_gpu, lm_gpu, max(ffn_max, 0.0), ffn_min, predictor_gpu=pred_gpu,
                     dense_value=float(items.value[chosen].sum()))


def all_frequencies_sorted(problem: PlacementProblem) -> np.ndarray:
    """Every FFN neuron's activation frequency, descending."""
    return -np.sort(-np.concatenate(problem.frequencies))


def greedy_dense_choice(items: DenseItems, window: ImpactWindow, neuron_bytes: float,
                        freqs_desc: np.ndarray) -> np.ndarray:
    """Greedy by impact per byte over dense items and single neurons together: walk every
    item in descending density and take it if it still fits (neurons are M_n bytes each and
    fill whatever room is left; on a tie the dense part goes first). Returns the chosen
    dense items; the neurons then follow as the top-k of the remaining window."""
    chosen = np.zeros(items.n, dtype=bool)
    density = items.density
    order = np.lexsort((np.arange(items.n), -density))  # densest first, stable
    used, taken = 0.0, 0
    for j in order:
        hotter = int(np.searchsorted(-freqs_desc, -density[j], side="left"))  # f > density
        if hotter > taken:
            room = int(math.floor((window.gpu_max - used) / neuron_bytes + 1e-9))
            add = min(hotter - taken, max(room, 0))
            used += add * neuron_bytes
            taken = hotter
        if used + items.nbytes[j] <= window.gpu_max + 1e-6:
            chosen[j] = True
            used += float(items.nbytes[j])
    return chosen


def plan_impact_greedy(cfg: SparseSolverConfig, problem: PlacementProblem, bm: ByteModel,
                       what: str) -> tuple[DensePlan, DenseItems, ImpactWindow]:
    """The impact policy's greedy plan; if the chosen dense set leaves the host short,
    dense items are moved to the accelerator by density until it fits."""
    items = dense_items(cfg, bm, resolve_context(cfg, problem))
    window = impact_window(bm, items, what)
    chosen = greedy_dense_choice(items, window, bm.neuron_bytes,
                                 all_frequencies_sorted(problem))
    plan = plan_from_items(bm, items, chosen, window)
    if plan is None:  # host short: the GPU must take more bytes than neurons can give
        for j in np.lexsort((np.arange(items.n), -items.density)):
            if chosen[j]:
                continue
            trial = chosen.copy()
            trial[j] = True
            if float(items.nbytes[trial].sum()) > window.gpu_max + 1e-6:
                continue
            chosen = trial
            plan = plan_from_items(bm, items, chosen, window)
            if plan is not None:
                break
    if plan is None:
        raise PlacementInfeasibleError("CPU", window.gpu_min, window.gpu_max,
                                       f"{what}: no split of dense parts and neurons fits")
    return plan, items, window


def impact_upper_bound(items: DenseItems, window: ImpactWindow, neuron_bytes: float,
                       freqs_desc: np.ndarray) -> float:
    """Fractional knapsack over dense items and single neurons (no C_l): an upper bound on
    the impact objective (dense value + GPU neuron frequencies)."""
    density = np.concatenate([items.density, freqs_desc[freqs_desc > 0]])
    nbytes = np.concatenate([items.nbytes / neuron_bytes,
                             np.ones(int(np.count_nonzero(freqs_desc > 0)))])
    order = np.argsort(-density, kind="stable")
    cum = np.cumsum(nbytes[order])
    cap = window.gpu_max / neuron_bytes
    k = int(np.searchsorted(cum, cap, side="right"))
    full = float((density[order[:k]] * nbytes[order[:k]]).sum())
    if k < order.size:
        left = cap - (cum[k - 1] if k > 0 else 0.0)
        full += float(density[order[k]] * max(left, 0.0))
    return full


def min_gpu_neurons(mode: CommMode | str, neuron_bytes: float, hw: HardwareProfile,
                    t_sync_s: float, mean_frequency: np.ndarray, neurons: int) -> np.ndarray:
    """C_l per layer: the fewest GPU neurons for which the GPU time saved pays for one
    synchronisation, C_l * T_gpu + T_sync <= C_l * T_cpu (PowerInfer paper, §6), with
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
    attn_gpu, pred_gpu = plan.attn_gpu, plan.pred_gpu
    n_gpu_ffn = float(sum(ids.size for ids in gpu_ids))
    gpu = DeviceBytes(
        ffn=n_gpu_ffn * bm.neuron_bytes,
        attention=bm.attn * attn_gpu.sum(), kv_cache=bm.kv * attn_gpu.sum(),
        predictors=float(bm.predictor[pred_gpu].sum()),
        embeddings=bm.lm_head if plan.lm_head_gpu else 0.0,
        buffers=bm.gpu_buffer,
    )
    cpu = DeviceBytes(
        ffn=(bm.n_layers * bm.neurons - n_gpu_ffn) * bm.neuron_bytes,
        attention=bm.attn * (~attn_gpu).sum(), kv_cache=bm.kv * (~attn_gpu).sum(),
        predictors=float(bm.predictor[~pred_gpu].sum()),
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
        attn_device=devices, kv_device=list(devices),
        predictor_device=[GPU if g else CPU for g in pred_gpu],
        embed_device=CPU if bm.embed_in > 0 else (GPU if plan.lm_head_gpu else CPU),
        lm_head_device=GPU if plan.lm_head_gpu else CPU,
        min_gpu_neurons=np.asarray(minimums, dtype=np.int64), gpu=gpu, cpu=cpu, stats=stats,
    )
