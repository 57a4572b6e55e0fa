"""Fitting a synthetic activation profile to published statistics: per-layer activation
probabilities whose per-token sparsity and skew (the share of neurons covering 80% of the
activations) match the model family's published numbers (see powerbench.profiling.synthetic,
which draws the profile from them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from powerbench.model.spec import ModelSpec

log = logging.getLogger(__name__)

COVERAGE = 0.8  # the published skew statistic: share of neurons covering 80% of activations
COLD_MARGIN = 0.9  # cold-prefix layers get at most 90% of the published bound
_SIGMA_RANGE = (1e-3, 6.0)
_GAMMA_RANGE = (0.0, 16.0)

# (active fraction, block skew, model skew): the published points (model/spec.py).
SKEW_ANCHORS: tuple[tuple[float, float, float], ...] = (
    (0.03, 0.26, 0.17),  # OPT-30B
    (0.18, 0.43, 0.26),  # LLaMA(ReGLU)-70B
    (0.57, 0.69, 0.75),  # SwiGLU LLaMA2 (dense baseline)
)


def default_skews(active: float) -> tuple[float, float]:
    """(block, model) skew for an active fraction without published skews (see module doc)."""
    xs = [a for a, _, _ in SKEW_ANCHORS]
    block = float(np.interp(active, xs, [b for _, b, _ in SKEW_ANCHORS]))
    model = float(np.interp(active, xs, [m for _, _, m in SKEW_ANCHORS]))
    return block, model


@dataclass(frozen=True)
class SyntheticTargets:
    """What the fit aims at (conditional on routing for MoE)."""

    active: float  # mean active fraction per token (within routed experts)
    block_skew: float
    model_skew: float
    cold_prefix_layers: int = 0
    cold_prefix_active: float | None = None
    block_skew_published: bool = True
    model_skew_published: bool = True

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> SyntheticTargets:
        if spec.stats is None:
            raise ValueError(f"model {spec.name!r} has no published sparsity stats "
                             "(conf/model/<name>.yaml `stats:`); cannot synthesise a profile")
        stats = spec.stats
        active = 1.0 - stats.token_sparsity
        if not 0.0 < active < 1.0:
            raise ValueError(f"{spec.name}: token_sparsity must be in (0, 1), got "
                             f"{stats.token_sparsity}")
        block, model = default_skews(active)
        cold_layers = stats.cold_prefix_layers if stats.cold_prefix_active is not None else 0
        return cls(
            active=active,
            block_skew=stats.block_skew if stats.block_skew is not None else block,
            model_skew=stats.model_skew if stats.model_skew is not None else model,
            cold_prefix_layers=min(cold_layers, spec.n_layers),
            cold_prefix_active=stats.cold_prefix_active if cold_layers else None,
            block_skew_published=stats.block_skew is not None,
            model_skew_published=stats.model_skew is not None,
        )


@dataclass(frozen=True)
class SyntheticFit:
    """Solved parameters; `probabilities()` rebuilds the (unshuffled) p matrix."""

    n_layers: int
    n_neurons: int
    sigma: float
    gamma: float
    base: float
    layer_scale: tuple[float, ...]  # m_l
    active: float  # achieved (exact, before rounding to counts)
    block_skew: float
    model_skew: float
    converged: bool

    def shape(self) -> np.ndarray:
        return _shape(self.n_neurons, self.sigma)

    def probabilities(self) -> np.ndarray:
        """float64 [L, N], each row ascending (neuron order not yet shuffled)."""
        m = np.asarray(self.layer_scale)[:, None]
        return np.minimum(1.0, m * self.shape()[None, :])

    def as_meta(self) -> dict:
        d = asdict(self)
        d.pop("layer_scale")
        return d


# ---- exact statistics of p = min(1, m * u) from prefix sums -------------------------------


@lru_cache(maxsize=8)
def _shape(n: int, sigma: float) -> np.ndarray:
    """Mean-one log-normal bin means over n equal-probability bins, ascending."""
    edges = ndtri(np.linspace(0.0, 1.0, n + 1))  # -inf ... +inf
    u = np.diff(ndtr(edges - sigma)) * n
    u = np.maximum(u, 1e-300)
    u.setflags(write=False)
    return u


class _Grid:
    """u ascending and its prefix sums P[k] = sum(u[:k])."""

    def __init__(self, n: int, sigma: float) -> None:
        self.n = n
        self.u = _shape(n, sigma)
        self.prefix = np.concatenate([[0.0], np.cumsum(self.u)])

    def clip_index(self, m: np.ndarray) -> np.ndarray:
        """First neuron index clipped at p = 1 (u >= 1 / m), per layer."""
        return np.searchsorted(self.u, 1.0 / m, side="left")

    def layer_mass(self, m: np.ndarray) -> np.ndarray:
        """Sum over neurons of min(1, m u) per layer."""
        i1 = self.clip_index(m)
        return (self.n - i1) + m * self.prefix[i1]

    def layer_share(self, m: np.ndarray, coverage: float = COVERAGE) -> np.ndarray:
        """Per-layer share of neurons covering `coverage` of the layer's mass (fractional)."""
        i1 = self.clip_index(m)
        clipped = (self.n - i1).astype(np.float64)
        goal = coverage * (clipped + m * self.prefix[i1])
        # Smallest k (from the top) whose mass reaches goal: the clipped ones first.
        residual = (goal - clipped) / m  # needed from the unclipped part, in u units
        target = self.prefix[i1] - residual  # P[i] <= target, i = first neuron needed
        i = np.clip(np.searchsorted(self.prefix, target, side="right") - 1, 0, self.n - 1)
        frac_i = i + (target - self.prefix[i]) / self.u[i]
        k = np.where(goal <= clipped, goal, self.n - frac_i)
        return k / self.n

    def model_share(self, m: np.ndarray, coverage: float = COVERAGE) -> float:
        """Share of all L x N neurons covering `coverage` of the whole model's mass."""
        i1 = self.clip_index(m)
        clipped_mass = float((self.n - i1).sum())
        total = clipped_mass + float((m * self.prefix[i1]).sum())
        goal = coverage * total
        n_all = self.n * m.size
        if goal <= clipped_mass:
            return goal / n_all

        def above(log_tau: float) -> tuple[float, float]:
            idx = np.minimum(np.searchsorted(self.u, math.exp(log_tau) / m, side="left"), i1)
            mass = clipped_mass + float((m * (self.prefix[i1] - self.prefix[idx])).sum())
            return mass, float((self.n - idx).sum())

        lo = math.log(float((m * self.u[0]).min()))  # everything above: mass = total
        hi = 0.0  # only clipped neurons above
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            if above(mid)[0] >= goal:
                lo = mid
            else:
                hi = mid
        mass_lo, count_lo = above(lo)
        # remove the surplus at threshold value tau (partial neuron): smooth in parameters
        count = count_lo - (mass_lo - goal) / math.exp(lo)
        return max(count, 0.0) / n_all


# ---- the fit --------------------------------------------------------------------------------


def _solve(f: Callable[[float], float], lo: float, hi: float) -> tuple[float, bool]:
    """Root of a monotone f on [lo, hi]; the better bound if there is no sign change."""
    f_lo, f_hi = f(lo), f(hi)
    if f_lo == 0.0:
        return lo, True
    if f_hi == 0.0:
        return hi, True
    if (f_lo > 0) == (f_hi > 0):
        return (lo, False) if abs(f_lo) <= abs(f_hi) else (hi, False)
    return float(brentq(f, lo, hi, xtol=1e-7, rtol=1e-9, maxiter=200)), True


def _cold_cap(bound: float | None, n_neurons: int) -> float:
    """Mean active fraction allowed in a cold-prefix layer: the published bound is per
    token, so keep ~3 binomial standard deviations (and at least 10%) below it."""
    if not bound:
        return math.inf
    return min(COLD_MARGIN * bound, bound - 3.1 * math.sqrt(bound / n_neurons))


class _Fitter:
    def __init__(self, n_layers: int, n_neurons: int, t: SyntheticTargets) -> None:
        self.L, self.N, self.t = n_layers, n_neurons, t
        self.ramp = (np.arange(n_layers) / max(n_layers - 1, 1)) - 0.5
        self.cold = np.arange(n_layers) < t.cold_prefix_layers
        self.cap = _cold_cap(t.cold_prefix_active, n_neurons)
        self.converged = True

    def scales(self, base: float, gamma: float) -> np.ndarray:
        m = np.exp(base + gamma * self.ramp)
        return np.where(self.cold, np.minimum(m, self.cap), m)

    def solve_scales(self, grid: _Grid, gamma: float) -> np.ndarray:
        """m_l such that the model's mean active fraction equals the target."""
        return self.scales(self.solve_base(grid, gamma), gamma)

    def solve_base(self, grid: _Grid, gamma: float) -> float:
        goal = self.t.active * self.L * self.N

        def f(base: float) -> float:
            return float(grid.layer_mass(self.scales(base, gamma)).sum()) - goal

        lo = math.log(self.t.active) - gamma - 60.0
        hi = -math.log(grid.u[0]) + gamma + 1.0
        if f(hi) < 0:
            raise ValueError(
                f"active fraction {self.t.active:.4f} unreachable with {self.t.cold_prefix_layers}"
                f" of {self.L} layers capped at {self.cap:.4f}")
        return _solve(f, lo, hi)[0]

    def sigma_for(self, gamma: float) -> float:
        def f(sigma: float) -> float:
            grid = _Grid(self.N, sigma)
            m = self.solve_scales(grid, gamma)
            return float(grid.layer_share(m).mean()) - self.t.block_skew

        sigma, ok = _solve(f, *_SIGMA_RANGE)
        self.converged &= ok
        return sigma

    def model_share(self, gamma: float) -> float:
        grid = _Grid(self.N, self.sigma_for(gamma))
        return grid.model_share(self.solve_scales(grid, gamma))

    def fit(self) -> SyntheticFit:
        gamma, ok = _solve(lambda g: self.model_share(g) - self.t.model_skew, *_GAMMA_RANGE)
        self.converged = ok
        sigma = self.sigma_for(gamma)
        grid = _Grid(self.N, sigma)
        base = self.solve_base(grid, gamma)
        m = self.scales(base, gamma)
        return SyntheticFit(
            n_layers=self.L, n_neurons=self.N, sigma=sigma, gamma=gamma, base=base,
            layer_scale=tuple(float(x) for x in m),
            active=float(grid.layer_mass(m).sum()) / (self.L * self.N),
            block_skew=float(grid.layer_share(m).mean()),
            model_skew=grid.model_share(m),
            converged=self.converged,
        )


@lru_cache(maxsize=32)
def fit_probabilities(targets: SyntheticTargets, n_layers: int, n_neurons: int) -> SyntheticFit:
    """Solve (base, sigma, gamma) for these targets and shapes (cached; pure function)."""
    clamp = (0.01, COVERAGE - 1e-3)
    t = SyntheticTargets(**{
        **asdict(targets),
        "block_skew": float(np.clip(targets.block_skew, *clamp)),
        "model_skew": float(np.clip(targets.model_skew, *clamp)),
    })
    fit = _Fitter(n_layers, n_neurons, t).fit()
    if not fit.converged:
        log.warning("synthetic fit did not reach its targets %s: achieved block %.3f, model "
                    "%.3f", targets, fit.block_skew, fit.model_skew)
    return fit


# ---- drawing --------------------------------------------------------------------------------
