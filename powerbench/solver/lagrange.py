"""Lagrangian relaxation of the neuron-level placement problem with the C_l rule.

    max  sum_l P_l(k_l)   s.t.  sum_l k_l <= H,   k_l in {0} U [C_l, K]

(P_l: prefix sums of layer l's frequencies sorted descending, so P_l is concave.)
Dualising the budget with lambda >= 0 separates the layers: each takes the neurons worth
more than lambda, or exactly C_l of them if that is all that pays, or none. Every lambda
gives an upper bound  lambda * H + sum_l max(0, best_l(lambda))  on the optimum, and the
layer set it selects, filled exactly by `sparse.allocate`, a feasible placement. Bisection
on lambda finds the budget-tight point. Used by the ILP as its MIP start and to certify
the final placement at neuron level (`stats.extra["lagrangian_bound"]`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from powerbench.solver.sparse import allocate, counts_objective


@dataclass(frozen=True)
class LagrangeResult:
    counts: np.ndarray | None  # best feasible per-layer counts found (None: none)
    objective: float
    upper_bound: float  # valid for the neuron-level problem (budget H, C_l rule)
    lam: float


def _layer_choice(sorted_freqs: list[np.ndarray], prefix: list[np.ndarray],
                  minimums: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    """Per-layer counts maximising P_l(k) - lam * k over k in {0} U [C_l, K]; the summed
    profit (>= 0)."""
    counts = np.zeros(len(sorted_freqs), dtype=np.int64)
    profit = 0.0
    for i, (vals, pre) in enumerate(zip(sorted_freqs, prefix, strict=True)):
        k_min = int(minimums[i])
        if k_min > vals.size:
            continue
        k = int(np.searchsorted(-vals, -lam, side="left"))  # neurons worth more than lam
        if k >= k_min:
            gain = pre[k] - lam * k
        else:
            k, gain = k_min, pre[k_min] - lam * k_min
        if gain > 0 and k > 0:
            counts[i] = k
            profit += gain
    return counts, profit


def lagrangian_heuristic(sorted_freqs: list[np.ndarray], prefix: list[np.ndarray],
                         minimums: np.ndarray, budget: int, need: int = 0,
                         iterations: int = 40) -> LagrangeResult:
    """Bisection on lambda; the best feasible fill among the layer sets met on the way."""
    lo_lam, hi_lam = 0.0, float(max((v[0] for v in sorted_freqs if v.size), default=0.0))
    best_ub = float("inf")
    tried: set[bytes] = set()
    best_counts, best_obj, best_lam = None, -1.0, 0.0

    def consider(counts: np.ndarray, lam: float) -> None:
        nonlocal best_counts, best_obj, best_lam
        layers = counts > 0
        key = np.packbits(layers).tobytes()
        if key in tried:
            return
        tried.add(key)
        filled = allocate(sorted_freqs, budget, layers, minimums, need=need)
        if filled is None:
            return
        value = counts_objective(prefix, filled)
        if value > best_obj:
            best_counts, best_obj, best_lam = filled, value, lam

    for _ in range(iterations):
        lam = 0.5 * (lo_lam + hi_lam)
        counts, profit = _layer_choice(sorted_freqs, prefix, minimums, lam)
        best_ub = min(best_ub, lam * budget + profit)
        if counts.sum() > budget:
            lo_lam = lam
        else:
            hi_lam = lam
            consider(counts, lam)
    for lam in (lo_lam, hi_lam):  # the two sides of the budget-tight point
        counts, profit = _layer_choice(sorted_freqs, prefix, minimums, lam)
        best_ub = min(best_ub, lam * budget + profit)
        consider(counts, lam)
    return LagrangeResult(best_counts, max(best_obj, 0.0), best_ub, best_lam)
