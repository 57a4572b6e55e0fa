"""`ilp`: PowerInfer's neuron-placement integer program (design section 5) in cvxpy.

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
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from powerbench.solver.config import Backend, ILPConfig
from powerbench.solver.greedy import greedy_counts
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


@dataclass(frozen=True)
class Groups:
    """Neuron groups in sorted-impact order: group g covers sorted positions
    [start[g], start[g] + size[g]) of layer[g]."""

    layer: np.ndarray
    start: np.ndarray
    size: np.ndarray
    value: np.ndarray

    @property
    def n(self) -> int:
        return int(self.layer.size)


def make_groups(sorted_freqs: list[np.ndarray], group_size: int, allowed: np.ndarray,
                keep_zero: bool) -> Groups:
    """Contiguous groups of `group_size` sorted neurons per allowed layer (zero-impact
    neurons are left out unless the CPU's capacity may need them on the GPU)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    layer, start, size, value = [], [], [], []
    for idx, freqs in enumerate(sorted_freqs):
        if not allowed[idx]:
            continue
        n = freqs.size if keep_zero else int(np.count_nonzero(freqs > 0))
        starts = np.arange(0, n, group_size)
        sizes = np.minimum(group_size, n - starts)
        sums = np.add.reduceat(freqs[:n], starts) if n else np.zeros(0)
        layer.append(np.full(starts.size, idx))
        start.append(starts)
        size.append(sizes)
        value.append(sums)
    def cat(parts: list[np.ndarray], dt: type) -> np.ndarray:
        return np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)

    return Groups(cat(layer, np.int64), cat(start, np.int64), cat(size, np.int64),
                  cat(value, np.float64))


def groups_start(groups: Groups, counts: np.ndarray, minimums: np.ndarray, capacity: float,
                 floor: float, neuron_bytes: float) -> np.ndarray | None:
    """A feasible 0/1 start for the grouped program from neuron-level counts: each layer's
    leading groups covering min(counts, C_l) rounded to whole groups, trimmed of its
    coldest optional groups until the bytes fit (None if that cannot be made feasible)."""
    take = np.zeros(groups.n, dtype=bool)
    mandatory = np.zeros(groups.n, dtype=bool)
    for layer in np.flatnonzero(counts > 0):
        idx = np.flatnonzero(groups.layer == layer)
        if idx.size == 0:
            continue
        ends = np.cumsum(groups.size[idx])
        m = int(np.searchsorted(ends, minimums[layer]) + 1) if minimums[layer] > 0 else 0
        if m > idx.size:
            continue
        g = max(m, int(np.searchsorted(ends, counts[layer], side="right")))
        take[idx[:g]] = True
        mandatory[idx[:m]] = True
    weight = groups.size * neuron_bytes
    over = float(weight[take].sum()) - capacity
    if over > 0:
        optional = np.flatnonzero(take & ~mandatory)
        density = groups.value[optional] / groups.size[optional]
        for g in optional[np.argsort(density, kind="stable")]:  # coldest first: suffixes
            if over <= 0:
                break
            take[g] = False
            over -= weight[g]
        if over > 0:
            return None
    if float(weight[take].sum()) < floor:
        return None
    return take


@dataclass
class MIPResult:
    chosen: np.ndarray  # bool per group
    status: str
    objective: float | None
    bound: float | None
    gap: float | None
    backend_time_s: float
    compile_time_s: float
    n_binaries: int
    n_constraints: int
    dense_chosen: np.ndarray | None = None  # impact policy: bool per dense item


def _solver_kwargs(c: ILPConfig) -> dict[str, Any]:
    import cvxpy as cp

    if c.backend is Backend.highs:
        opts: dict[str, Any] = {"time_limit": float(c.time_limit_s),
                                "mip_rel_gap": float(c.mip_gap),
                                "presolve": "choose" if c.presolve else "off"}
        if c.threads:
            opts["threads"] = int(c.threads)
        return {"solver": cp.HIGHS, **opts, **c.backend_options}
    params: dict[str, Any] = {"limits/time": float(c.time_limit_s),
                              "limits/gap": float(c.mip_gap)}
    if not c.presolve:
        params["presolving/maxrounds"] = 0
    if c.threads:
        params["lp/threads"] = int(c.threads)
    return {"solver": cp.SCIP, "scip_params": {**params, **c.backend_options}}


def solve_grouped(groups: Groups, minimums: np.ndarray, plan: DensePlan, bm: ByteModel,
                  c: ILPConfig, start: np.ndarray | None = None,
                  dense: DenseItems | None = None,
                  dense_start: np.ndarray | None = None) -> MIPResult:
    """Build the grouped program in cvxpy and run the backend (HiGHS gets `start`, a
    feasible 0/1 vector over the groups, as its first incumbent). With `dense` (impact
    policy) the dense items are binaries too and `plan.ffn_gpu_max/min` bound the GPU
    bytes of groups and items together."""
    import cvxpy as cp

    t0 = time.perf_counter()
    n = groups.n
    a = cp.Variable(n, boolean=True, name="a_gpu")
    # Memory rows in bytes, divided by M_n for conditioning (a fixed unit such as GB
    # would put tiny models' rows below the backend's feasibility tolerance).
    unit = bm.neuron_bytes
    weight = groups.size * bm.neuron_bytes / unit
    gpu_bytes = weight @ a
    objective = groups.value @ a
    d = None
    if dense is not None and dense.n:
        d = cp.Variable(dense.n, boolean=True, name="d_gpu")
        gpu_bytes = gpu_bytes + (dense.nbytes / unit) @ d
        objective = objective + dense.value @ d
    constraints = [gpu_bytes <= plan.ffn_gpu_max / unit]
    if plan.ffn_gpu_min > 0:
        constraints.append(gpu_bytes >= plan.ffn_gpu_min / unit)
    layers = np.unique(groups.layer)
    row_of = {int(l_): r for r, l_ in enumerate(layers)}
    rows = np.array([row_of[int(l_)] for l_ in groups.layer], dtype=np.int64)
    per_layer = sp.csr_matrix((groups.size.astype(np.float64), (rows, np.arange(n))),
                              shape=(layers.size, n))  # neurons of layer l on the GPU
    need = minimums[layers].astype(np.float64)
    linked = np.flatnonzero(need >= 1)
    y = None
    if linked.size:
        y = cp.Variable(linked.size, boolean=True, name="y_layer")
        cap = np.asarray(per_layer.sum(axis=1)).ravel()[linked]
        sub = per_layer[linked]
        constraints += [sub @ a >= cp.multiply(need[linked], y),
                        sub @ a <= cp.multiply(cap, y)]
    if c.order_groups and n > 1:
        same = np.flatnonzero(groups.layer[1:] == groups.layer[:-1])
        if same.size:
            k = same.size
            order = sp.csr_matrix(
                (np.concatenate([np.ones(k), -np.ones(k)]),
                 (np.concatenate([np.arange(k), np.arange(k)]),
                  np.concatenate([same + 1, same]))), shape=(k, n))
            constraints.append(order @ a <= 0)
        if linked.size:
            # Implied by the ordering: a GPU layer holds at least its first m_l groups,
            # m_l = fewest groups reaching C_l. Valid inequalities that tighten the LP
            # relaxation from "C_l neurons somewhere" to "these groups": a_{l,j} >= y_l.
            rows_, cols_ = [], []
            for r, row in enumerate(linked):
                idx = np.flatnonzero(rows == row)  # this layer's groups, hottest first
                m = int(np.searchsorted(np.cumsum(groups.size[idx]), need[row]) + 1)
                cols_.append(idx[:m])
                rows_.append(np.full(min(m, idx.size), r))
            cover_a = sp.csr_matrix((np.ones(sum(x.size for x in cols_)),
                                     (np.arange(sum(x.size for x in cols_)),
                                      np.concatenate(cols_))),
                                    shape=(sum(x.size for x in cols_), n))
            cover_y = sp.csr_matrix((np.ones(cover_a.shape[0]),
                                     (np.arange(cover_a.shape[0]), np.concatenate(rows_))),
                                    shape=(cover_a.shape[0], linked.size))
            constraints.append(cover_a @ a >= cover_y @ y)
    prob = cp.Problem(cp.Maximize(objective), constraints)
    kwargs = _solver_kwargs(c)
    try:
        if start is not None and c.backend is Backend.highs and (d is None
                                                                  or dense_start is not None):
            y_start = None
            if y is not None:
                y_start = np.asarray(per_layer[linked] @ start.astype(np.float64)).ravel() > 0
            with warnings.catch_warnings():  # a time limit is reported in the status
                warnings.filterwarnings("ignore", message="Solution may be inaccurate")
                _solve_highs_from(prob, kwargs, {a: start, y: y_start, d: dense_start},
                                  c.verbose)
        else:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Solution may be inaccurate")
                prob.solve(verbose=c.verbose, **kwargs)
    except cp.error.SolverError as err:
        raise RuntimeError(f"ILP backend {c.backend.value} failed: {err}") from err
    wall = time.perf_counter() - t0
    stats = prob.solver_stats
    backend_time = float(stats.solve_time or 0.0) if stats is not None else 0.0
    bound, gap = _bound_and_gap(c.backend, stats)
    chosen = (np.zeros(n, dtype=bool) if a.value is None
              else np.asarray(a.value).ravel() > 0.5)
    dense_chosen = None
    if dense is not None:
        dense_chosen = (np.zeros(dense.n, dtype=bool) if d is None or d.value is None
                        else np.asarray(d.value).ravel() > 0.5)
    value = None
    if a.value is not None:
        value = float(groups.value[chosen].sum())
        if dense is not None and dense_chosen is not None:
            value += float(dense.value[dense_chosen].sum())
    if gap is not None and not np.isfinite(gap):  # no incumbent (e.g. time limit)
        gap = None
    if gap is None and prob.status == cp.OPTIMAL:
        gap = 0.0
    n_cons = sum(int(np.prod(con.shape)) if con.shape else 1 for con in constraints)
    return MIPResult(chosen=chosen, status=str(prob.status), objective=value, bound=bound,
                     gap=gap, backend_time_s=backend_time,
                     compile_time_s=max(wall - backend_time, 0.0),
                     n_binaries=n + int(linked.size) + (dense.n if d is not None and dense
                                                        else 0),
                     n_constraints=n_cons, dense_chosen=dense_chosen)


def _solve_highs_from(prob: Any, kwargs: dict[str, Any], start: dict[Any, Any],
                      verbose: bool) -> None:
    """Solve with HiGHS from a MIP start. cvxpy's HiGHS interface warm-starts from its
    solver cache (HiGHS `setSolution`); we compile the problem, seed that cache with the
    start in cvxpy's column order, and unpack the result back into the variables."""
    import cvxpy as cp
    import highspy

    opts = {k: v for k, v in kwargs.items() if k != "solver"}
    data, chain, inverse = prob.get_problem_data(cp.HIGHS, verbose=verbose)
    cols = data[cp.settings.PARAM_PROB].var_id_to_col
    x0 = np.zeros(data[cp.settings.C].shape[0])
    for var, value in start.items():
        if var is not None and value is not None:
            x0[cols[var.id]:cols[var.id] + var.size] = np.asarray(value, dtype=np.float64)
    seed = highspy.HighsSolution()
    seed.col_value = x0.tolist()
    seed.value_valid = True
    cache = {cp.HIGHS: (None, None, {"model_status": "kOptimal", "solution": seed})}
    raw = chain.solver.solve_via_data(data, True, verbose, opts, solver_cache=cache)
    prob.unpack_results(raw, chain, inverse)


def _bound_and_gap(backend: Backend, stats: Any) -> tuple[float | None, float | None]:
    """Upper bound on the (maximised) grouped objective and the relative gap."""
    extra = getattr(stats, "extra_stats", None)
    if extra is None:
        return None, None
    try:
        if backend is Backend.highs:
            # cvxpy hands HiGHS the minimisation of -objective.
            return -float(extra.mip_dual_bound), float(extra.mip_gap)
        model = extra["model"]
        return -float(model.getDualbound()), float(model.getGap())
    except (AttributeError, KeyError, TypeError, ValueError):
        return None, None


def _decode(groups: Groups, chosen: np.ndarray, problem: PlacementProblem) -> list[np.ndarray]:
    """Per layer: neuron ids of the chosen groups."""
    ids: list[list[np.ndarray]] = [[] for _ in range(problem.spec.n_layers)]
    for g in np.flatnonzero(chosen):
        layer, start, size = int(groups.layer[g]), int(groups.start[g]), int(groups.size[g])
        ids[layer].append(problem.order[layer][start:start + size])
    return [np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64) for parts in ids]


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
    ids = _decode(groups, mip.chosen, problem)
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
            ids = _decode(groups, mip.chosen, problem)
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
