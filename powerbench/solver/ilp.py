"""`ilp`: PowerInfer's neuron-placement integer program (PowerInfer paper, §6) in cvxpy.

Variables, after grouping each layer's neurons by descending impact into groups of
`group_size` (the last group of a layer may be smaller):

    a_g in {0, 1}   group g on the GPU (a_{CPU,g} = 1 - a_g: each group on one unit)
    y_l in {0, 1}   layer l has GPU neurons (only for layers with C_l >= 1)

    maximise    sum_g v_g a_g                          v_g = sum of the group's frequencies
    subject to  sum_g M_n s_g a_g <= GPU FFN bytes      (GPU capacity after dense parts)
                sum_g M_n s_g a_g >= FFN bytes the CPU cannot hold      (CPU capacity)
                sum_{g in l} s_g a_g >= C_l y_l,  <= K_l y_l            (communication)
                a_{l,g+1} <= a_{l,g}         (order_groups: hottest first; symmetry breaking)

Layers whose C_l exceeds their size (the accelerator never pays for a sync) get no
variables. The backend (HiGHS, presolve off by default, or SCIP) stops at `mip_gap` or
`time_limit_s`; `stats.gap` is its reported relative gap on this grouped program.

Refinement (`refine: true`): grouping makes the program coarser than the neuron-level
problem. Given a set Y of GPU layers, the neuron-level optimum is exact and cheap (each
layer's sorted values have falling marginal gains: take C_l hottest neurons in every
layer of Y, then the globally hottest of the rest; `sparse.allocate`). It is evaluated
for Y from the ILP and for Y from greedy's top-k with the layers that violate C_l
dropped (a feasible incumbent), and the better one is returned (`stats.extra["source"]`).
Consequences: with the communication term off, the result equals greedy's top-k (its
exact optimum); with it on, the objective is never below greedy's whenever greedy is
C_l-feasible, and never below the C_l-repaired greedy otherwise.

`stats.extra["bound_gap"]` compares with greedy's top-k without C_l: an upper bound of the
neuron-level problem, so it certifies the returned placement, not just the grouped one.

`dense_policy: impact` (separate GPU and CPU memories): the dense parts become binaries of
the same program instead of being placed first, d_j in {0, 1} for each layer's attention
(+ its KV cache), each layer's predictor and the output projection, with value v_j = bytes
read per token / M_n (the FFN objective's unit: the time saved per token on the GPU is
v x M_n x (1/BW_cpu - 1/BW_gpu) for a neuron group and a dense part alike):

    maximise    sum_g v_g a_g + sum_j v_j d_j
    subject to  sum_g M_n s_g a_g + sum_j B_j d_j <= GPU bytes after buffers
                ... >= bytes the host cannot hold          (+ the C_l rows as above)

Refinement evaluates the neuron-level optimum for the ILP's dense set and for the impact
greedy's (`sparse.greedy_dense_choice`); `stats.objective` stays the FFN part (sum of GPU
neuron frequencies), `extra["impact_objective"]` adds the dense value, and
`extra["bound_gap"]` is measured against a fractional knapsack of every item.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from powerbench.solver.config import ILPConfig
from powerbench.solver.greedy import greedy_counts
from powerbench.solver.ilp_program import (
    MIPResult,
    decode_groups,
    groups_start,
    make_groups,
    solve_grouped,
)
from powerbench.solver.lagrange import lagrangian_heuristic
from powerbench.solver.placement import Placement, PlacementInfeasibleError, SolverStats
from powerbench.solver.problem import ByteModel, PlacementProblem, byte_model
from powerbench.solver.sparse import (
    ATTN,
    PREDICTOR,
    DenseItems,
    DensePlan,
    all_frequencies_sorted,
    allocate,
    counts_objective,
    impact_applies,
    impact_upper_bound,
    layer_minimums,
    neuron_budget,
    plan_dense,
    plan_from_items,
    plan_impact_greedy,
    prefix_ids,
    prefix_sums,
    sparse_placement,
)

log = logging.getLogger(__name__)



def solve_ilp(cfg: ILPConfig, problem: PlacementProblem) -> Placement:
    c = cfg
    start = time.perf_counter()
    bm = byte_model(c, problem)
    what = f"ilp: {problem.spec.name} ({problem.weight_dtype.value}) on {problem.hardware.name}"
    if impact_applies(c, bm):
        return _solve_impact(c, problem, bm, what, start)
    plan = plan_dense(c, bm, what)
    minimums = layer_minimums(c, problem, bm)
    allowed = minimums <= bm.neurons
    hi, lo = neuron_budget(plan, bm)
    prefix = prefix_sums(problem)
    groups = make_groups(problem.sorted_frequencies, c.group_size, allowed, keep_zero=lo > 0)
    lag = lagrangian_heuristic(problem.sorted_frequencies, prefix, minimums, hi, need=lo)

    extra: dict[str, Any] = {"group_size": c.group_size, "n_groups": groups.n,
                             "ffn_budget_bytes": plan.ffn_gpu_max,
                             "forbidden_layers": int((~allowed).sum()),
                             "lagrangian_objective": lag.objective,
                             "lagrangian_bound": lag.upper_bound}
    if groups.n == 0 or hi == 0:
        if lo > 0:
            raise PlacementInfeasibleError("CPU", lo * bm.neuron_bytes, 0.0, what)
        mip = MIPResult(np.zeros(groups.n, dtype=bool), "optimal", 0.0, 0.0, 0.0, 0.0, 0.0,
                        0, 0)
    else:
        seed = None
        if c.warm_start and lag.counts is not None:
            seed = groups_start(groups, lag.counts, minimums, plan.ffn_gpu_max,
                                plan.ffn_gpu_min, bm.neuron_bytes)
        extra["warm_start"] = seed is not None
        mip = solve_grouped(groups, minimums, plan, bm, c, start=seed)
    if mip.objective is None:
        if "infeasible" in mip.status:
            raise PlacementInfeasibleError(
                "CPU", plan.ffn_gpu_min, plan.ffn_gpu_max,
                f"{what}: the ILP is {mip.status} (the CPU cannot hold the FFN neurons the GPU "
                "may not take under the C_l rule)")
        if not c.refine:
            raise RuntimeError(f"{what}: the ILP backend returned no solution ({mip.status}) "
                               f"within {c.time_limit_s} s; raise time_limit_s or enable refine")
        log.warning("%s: no ILP solution (%s); using the heuristic incumbents", what, mip.status)
    ids = decode_groups(groups, mip.chosen, problem)
    counts = np.array([x.size for x in ids])
    objective, source = float(mip.objective or 0.0), "ilp"

    top = greedy_counts(problem, plan, bm)
    upper = min(counts_objective(prefix, top), lag.upper_bound)
    if c.refine:
        ok = (top > 0) & (top >= minimums) & allowed
        candidates = {
            "ilp_refined": allocate(problem.sorted_frequencies, hi, counts > 0, minimums,
                                    need=lo),
            "lagrangian": lag.counts,
            "greedy_repaired": allocate(problem.sorted_frequencies, hi, ok, minimums, need=lo),
        }
        for label, cand in candidates.items():
            if cand is None:
                continue
            value = counts_objective(prefix, cand)
            if value > objective + 1e-12:
                objective, source, ids = value, label, prefix_ids(problem, cand)
    extra.update(
        source=source, bound_gap=max(upper - objective, 0.0) / upper if upper > 0 else 0.0,
        neuron_upper_bound=upper, greedy_objective=counts_objective(prefix, top),
        greedy_cl_violations=int(np.sum((top > 0) & (top < minimums))),
        grouped_objective=mip.objective, grouped_bound=mip.bound,
        backend_time_s=mip.backend_time_s, compile_time_s=mip.compile_time_s,
        n_binaries=mip.n_binaries, n_constraints=mip.n_constraints)
    stats = SolverStats(solve_time_s=time.perf_counter() - start, objective=objective,
                        gap=mip.gap, status=mip.status, backend=c.backend.value, extra=extra)
    return sparse_placement("ilp", c, problem, bm, plan, ids, minimums, stats)


def _best_neurons(problem: PlacementProblem, plan: DensePlan, bm: ByteModel,
                  minimums: np.ndarray, allowed: np.ndarray, prefix: list[np.ndarray],
                  layers: np.ndarray | None) -> tuple[np.ndarray | None, str, float]:
    """The best neuron-level counts for a fixed dense plan among: the exact fill of
    `layers` (the ILP's GPU layers), the Lagrangian heuristic and the C_l-repaired greedy
    top-k. Returns (counts, source, FFN objective); counts None if none is feasible."""
    hi, lo = neuron_budget(plan, bm)
    cands: dict[str, np.ndarray | None] = {}
    if layers is not None:
        cands["ilp_refined"] = allocate(problem.sorted_frequencies, hi, layers & allowed,
                                        minimums, need=lo)
    lag = lagrangian_heuristic(problem.sorted_frequencies, prefix, minimums, hi, need=lo)
    cands["lagrangian"] = lag.counts
    top = allocate(problem.sorted_frequencies, hi, np.ones(bm.n_layers, dtype=bool),
                   np.zeros(bm.n_layers, dtype=np.int64), need=lo)
    if top is not None:
        ok = (top > 0) & (top >= minimums) & allowed
        cands["greedy_repaired"] = allocate(problem.sorted_frequencies, hi, ok, minimums,
                                            need=lo)
    best, source, value = None, "none", -1.0
    for label, cand in cands.items():
        if cand is None:
            continue
        v = counts_objective(prefix, cand)
        if v > value + 1e-12:
            best, source, value = cand, label, v
    return best, source, max(value, 0.0)


def _solve_impact(c: ILPConfig, problem: PlacementProblem, bm: ByteModel, what: str,
                  start: float) -> Placement:
    """`dense_policy: impact`: dense parts and neuron groups in one program (module doc)."""
    gplan, items, window = plan_impact_greedy(c, problem, bm, what)
    minimums = layer_minimums(c, problem, bm)
    allowed = minimums <= bm.neurons
    prefix = prefix_sums(problem)
    groups = make_groups(problem.sorted_frequencies, c.group_size, allowed,
                         keep_zero=window.gpu_min > 0)
    seed_a, seed_d = None, None
    if c.warm_start:  # the greedy dense set + the Lagrangian neurons for its window
        hi, lo = neuron_budget(gplan, bm)
        lag = lagrangian_heuristic(problem.sorted_frequencies, prefix, minimums, hi, need=lo)
        if lag.counts is not None:
            seed_a = groups_start(groups, lag.counts, minimums, gplan.ffn_gpu_max,
                                  gplan.ffn_gpu_min, bm.neuron_bytes)
            seed_d = _items_of(gplan, items)
    rows = DensePlan(np.zeros(bm.n_layers, dtype=bool), False, window.gpu_max, window.gpu_min)
    mip = solve_grouped(groups, minimums, rows, bm, c, start=seed_a, dense=items,
                        dense_start=seed_d if seed_a is not None else None)
    extra: dict[str, Any] = {"dense_policy": "impact", "group_size": c.group_size,
                             "n_groups": groups.n, "n_dense_items": items.n,
                             "forbidden_layers": int((~allowed).sum()),
                             "warm_start": seed_a is not None}
    candidates: list[tuple[str, DensePlan, np.ndarray | None]] = []
    if mip.objective is not None and mip.dense_chosen is not None:
        plan = plan_from_items(bm, items, mip.dense_chosen, window)
        if plan is not None:
            ids = decode_groups(groups, mip.chosen, problem)
            candidates.append(("ilp", plan, np.array([x.size for x in ids]) > 0))
    elif not c.refine:
        raise RuntimeError(f"{what}: the ILP backend returned no solution ({mip.status}) "
                           f"within {c.time_limit_s} s; raise time_limit_s or enable refine")
    candidates.append(("greedy_dense", gplan, None))
    best: tuple[float, str, DensePlan, np.ndarray] | None = None
    for label, plan, layers in candidates:
        counts, source, ffn = _best_neurons(problem, plan, bm, minimums, allowed, prefix,
                                            layers)
        if counts is None:
            continue
        total = plan.dense_value + ffn
        if best is None or total > best[0] + 1e-9:
            best = (total, f"{label}:{source}", plan, counts)
    if best is None:
        raise PlacementInfeasibleError("CPU", window.gpu_min, window.gpu_max,
                                       f"{what}: no C_l-feasible split of the neurons")
    total, source, plan, counts = best
    upper = impact_upper_bound(items, window, bm.neuron_bytes,
                               all_frequencies_sorted(problem))
    ffn_objective = counts_objective(prefix, counts)
    extra.update(source=source, impact_objective=total, dense_value=plan.dense_value,
                 impact_upper_bound=upper,
                 bound_gap=max(upper - total, 0.0) / upper if upper > 0 else 0.0,
                 ffn_budget_bytes=plan.ffn_gpu_max, grouped_objective=mip.objective,
                 grouped_bound=mip.bound, backend_time_s=mip.backend_time_s,
                 compile_time_s=mip.compile_time_s, n_binaries=mip.n_binaries,
                 n_constraints=mip.n_constraints)
    stats = SolverStats(solve_time_s=time.perf_counter() - start, objective=ffn_objective,
                        gap=mip.gap, status=mip.status, backend=c.backend.value, extra=extra)
    return sparse_placement("ilp", c, problem, bm, plan, prefix_ids(problem, counts),
                            minimums, stats)


def _items_of(plan: DensePlan, items: DenseItems) -> np.ndarray:
    """The dense items a plan puts on the accelerator (bool per item)."""
    out = np.zeros(items.n, dtype=bool)
    for j, (kind, layer) in enumerate(zip(items.kind, items.layer, strict=True)):
        if kind == ATTN:
            out[j] = bool(plan.attn_gpu[layer])
        elif kind == PREDICTOR:
            out[j] = bool(plan.pred_gpu[layer])
        else:
            out[j] = plan.lm_head_gpu
    return out
