"""The grouped integer program behind `ilp` (see powerbench.solver.ilp): neuron groups by
descending impact, the warm start, the cvxpy model and its backends (HiGHS, SCIP), and the
decoding of the chosen groups back to neurons.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from powerbench.solver.config import Backend, ILPConfig
from powerbench.solver.problem import ByteModel, PlacementProblem
from powerbench.solver.sparse import (
    DenseItems,
    DensePlan,
)


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


def decode_groups(groups: Groups, chosen: np.ndarray, problem: PlacementProblem) -> list[np.ndarray]:
    """Per layer: neuron ids of the chosen groups."""
    ids: list[list[np.ndarray]] = [[] for _ in range(problem.spec.n_layers)]
    for g in np.flatnonzero(chosen):
        layer, start, size = int(groups.layer[g]), int(groups.start[g]), int(groups.size[g])
        ids[layer].append(problem.order[layer][start:start + size])
    return [np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64) for parts in ids]
