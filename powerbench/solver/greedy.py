"""`greedy`: PowerInfer's released behaviour, a global top-k by activation frequency.

Every FFN neuron of a model has the same bytes M_n, so under a byte budget the knapsack
is a cardinality constraint and the top-k is its exact optimum; the communication
minimum C_l is *not* enforced (it is computed and the violations are reported in
`stats.extra["cl_violations"]`).

With `dense_policy: impact` the dense parts are items of the same greedy: every dense part
and every neuron is walked in descending impact per byte and taken while it fits
(`sparse.greedy_dense_choice`); the neurons are then the top-k of what is left.
"""

from __future__ import annotations

import time

import numpy as np

from powerbench.solver.config import GreedyConfig, SparseSolverConfig
from powerbench.solver.placement import Placement, PlacementInfeasibleError, SolverStats
from powerbench.solver.problem import ByteModel, PlacementProblem, byte_model
from powerbench.solver.sparse import (
    DensePlan,
    allocate,
    counts_objective,
    impact_applies,
    layer_minimums,
    neuron_budget,
    plan_dense,
    plan_impact_greedy,
    prefix_ids,
    prefix_sums,
    sparse_placement,
)


def greedy_counts(problem: PlacementProblem, plan: DensePlan, bm: ByteModel) -> np.ndarray:
    """Per-layer GPU neuron counts of the global top-k (k from the byte window)."""
    hi, lo = neuron_budget(plan, bm)
    n = problem.spec.n_layers
    counts = allocate(problem.sorted_frequencies, hi, np.ones(n, dtype=bool),
                      np.zeros(n, dtype=np.int64), need=lo)
    if counts is None:  # plan_dense already guarantees lo <= hi
        raise PlacementInfeasibleError("GPU", lo * bm.neuron_bytes, hi * bm.neuron_bytes)
    return counts


def solve_greedy(cfg: GreedyConfig, problem: PlacementProblem) -> Placement:
    c = cfg
    return _solve(c, problem, "greedy")


def _solve(c: SparseSolverConfig, problem: PlacementProblem, name: str) -> Placement:
    start = time.perf_counter()
    bm = byte_model(c, problem)
    what = f"{name}: {problem.spec.name} ({problem.weight_dtype.value}) on {problem.hardware.name}"
    impact = impact_applies(c, bm)
    plan = plan_impact_greedy(c, problem, bm, what)[0] if impact else plan_dense(c, bm, what)
    counts = greedy_counts(problem, plan, bm)
    minimums = layer_minimums(c, problem, bm)
    violations = int(np.sum((counts > 0) & (counts < minimums)))
    objective = counts_objective(prefix_sums(problem), counts)
    extra = {"cl_violations": violations, "ffn_budget_bytes": plan.ffn_gpu_max,
             "dense_policy": "impact" if impact else "first"}
    if impact:
        extra.update(dense_value=plan.dense_value, impact_objective=plan.dense_value + objective)
    stats = SolverStats(
        solve_time_s=time.perf_counter() - start, objective=objective,
        gap=None if impact else 0.0,  # impact greedy is a heuristic (whole dense parts)
        status=("heuristic" if impact else "optimal") + ("" if violations == 0
                                                          else "_ignoring_cl"),
        backend="numpy", extra=extra,
    )
    return sparse_placement(name, c, problem, bm, plan, prefix_ids(problem, counts), minimums,
                            stats)
