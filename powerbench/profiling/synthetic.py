"""Synthetic activation profiles for shape-only models, fitted to published statistics.

The model (design section 4 gives the targets):

    p[l, j] = min(1, m_l * u_j(sigma))          activation probability of neuron j, layer l

- `u(sigma)`: a mean-one log-normal *shape*. Neuron j (of N, before shuffling) gets the
  mean of exp(sigma z - sigma^2 / 2), z ~ N(0, 1), over the j-th of N equal-probability
  quantile bins: deterministic and mass-preserving, so skew is a smooth function of sigma
  and not a sampling accident. Larger sigma = a heavier hot tail = lower skew share.
- `m_l = exp(base + gamma * r_l)`, r_l = l / (L - 1) - 1/2: per-layer scale, activity
  growing with depth (gamma >= 0); layers below `cold_prefix_layers` are capped at
  min(COLD_MARGIN * b, b - 3.1 sqrt(b / N)), b = cold_prefix_active, so that nearly every
  token stays under the bound (OPT-30B: first 24 layers under 1% active per token).
  The spread of m_l across layers is what makes the whole-model skew smaller than the
  block skew.

Three unknowns, solved numerically (nested Brent root finding, no hand tuning):
    base : mean over layers and neurons of p      = 1 - token_sparsity
    sigma: mean over layers of the block skew      = block_skew
    gamma: skew over all the model's neurons       = model_skew
All three statistics are evaluated exactly on the full N-neuron grid in O(L log N) from
prefix sums of the sorted shape (no sorting inside the solver). Where a target cannot be
reached (e.g. model_skew above what equal layers give), the nearest bound is used and
`meta["fit"]["converged"]` is False.

Missing skews default to a piecewise-linear interpolation, in the active fraction
a = 1 - token_sparsity, between the published points of design section 4: OPT-30B
(a = 0.03: block 0.26, model 0.17), LLaMA(ReGLU)-70B (a = 0.18: 0.43, 0.26) and
SwiGLU LLaMA2 (a = 0.57: 0.69, 0.75; its sparsity from LLaMA2-13B); clamped outside.

Mixture of experts (n_experts > 1): a layer has n_experts * d_ffn neurons (expert e owns
ids [e * d_ffn, (e + 1) * d_ffn)); each token is routed to `experts_per_token` distinct
experts chosen uniformly (balanced routing), and only their neurons can fire. The fit
above is on the conditional probability within a routed expert (published MoE sparsity
is "per expert"); the profile's counts/frequencies are marginal: (k / E) * p_cond.

Drawn parts (seeded, `numpy.random.default_rng(seed)`):
- neuron order: a random permutation per layer (hot neurons are not the first ids);
- counts = round(p * n_tokens) (expected counts);
- token_active[t]: the per-token active fraction of n_tokens independent tokens, from the
  normal approximation of the Poisson-binomial sum of Bernoulli(p) (MoE: given the
  token's routed experts). Neurons are independent given p, so the per-token spread is
  the binomial one (real tokens are burstier);
- trace: `trace_tokens` per-token masks, each neuron Bernoulli(p) independently, stored
  bit-packed (LayerProfile.trace). To draw OPT-175B (96 x 49152 x 256) in about a second,
  neurons with p >= 0.5 compare 16-bit uniforms (p quantised to 2^-16), and those with
  p < 0.5 use Poisson splitting: Poisson(-T ln(1 - p)) uniform token positions per neuron
  mark each of the T tokens independently with probability exactly p, so the work scales
  with the active entries, not T x N. MoE: drawn only for each token's routed experts.
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
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile, pack_masks

log = logging.getLogger(__name__)

COVERAGE = 0.8  # the published skew statistic: share of neurons covering 80% of activations
COLD_MARGIN = 0.9  # cold-prefix layers get at most 90% of the published bound
DENSE_DRAW_P = 0.5  # trace neurons at or above this probability are drawn densely
_SIGMA_RANGE = (1e-3, 6.0)
_GAMMA_RANGE = (0.0, 16.0)

# (active fraction, block skew, model skew): design section 4's published points.
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


def _draw_masks(p: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """bool [n, N]: each entry Bernoulli(p[j]) independently (see module doc)."""
    masks = np.zeros((n, p.size), dtype=bool)
    dense = np.flatnonzero(p >= DENSE_DRAW_P)
    if dense.size:  # 16-bit uniforms: p quantised to 2^-16 (p = 1 always fires)
        threshold = np.rint(p[dense] * 65536).astype(np.uint32)
        masks[:, dense] = rng.integers(0, 65536, size=(n, dense.size), dtype=np.uint16) < threshold
    sparse = np.flatnonzero((p > 0) & (p < DENSE_DRAW_P))
    hits = rng.poisson(-n * np.log1p(-p[sparse]))  # Poisson splitting (module doc)
    neuron = np.repeat(sparse, hits)
    masks[rng.integers(0, n, size=neuron.size), neuron] = True
    return masks


def _route(n: int, n_experts: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """int [n, k]: k distinct experts per token, uniformly."""
    return np.argpartition(rng.random((n, n_experts)), k - 1, axis=1)[:, :k]


def _draw_trace(p_cond: np.ndarray, n: int, n_experts: int, k: int,
                rng: np.random.Generator) -> np.ndarray:
    """bool [n, N] trace masks; MoE: drawn only in each token's routed experts."""
    if n_experts == 1:
        return _draw_masks(p_cond, n, rng)
    masks = np.zeros((n, p_cond.size), dtype=bool)
    per_expert = p_cond.reshape(n_experts, -1)
    d_ffn = per_expert.shape[1]
    routed = _route(n, n_experts, k, rng)
    for e in range(n_experts):
        tokens = np.flatnonzero((routed == e).any(axis=1))
        masks[tokens, e * d_ffn:(e + 1) * d_ffn] = _draw_masks(per_expert[e], tokens.size, rng)
    return masks


def _token_active(p_cond: np.ndarray, n_tokens: int, n_experts: int, k: int,
                  rng: np.random.Generator) -> np.ndarray:
    """float32 [n_tokens] per-token active fractions (normal approx. of Poisson-binomial)."""
    per_expert = p_cond.reshape(n_experts, -1)
    mean_e, var_e = per_expert.sum(1), (per_expert * (1.0 - per_expert)).sum(1)
    if n_experts == 1:
        mean = np.full(n_tokens, mean_e[0])
        var = np.full(n_tokens, var_e[0])
    else:
        routed = _route(n_tokens, n_experts, k, rng)
        mean, var = mean_e[routed].sum(1), var_e[routed].sum(1)
    active = np.rint(mean + np.sqrt(var) * rng.standard_normal(n_tokens))
    return (np.clip(active, 0, p_cond.size) / p_cond.size).astype(np.float32)


def synthetic_profile(spec: ModelSpec, trace_tokens: int = 256, seed: int = 0,
                      n_tokens: int = 100_000) -> ActivationProfile:
    """A profile (source="synthetic") fitted to `spec.stats`; see the module docstring."""
    targets = SyntheticTargets.from_spec(spec)
    n_experts = max(spec.n_experts, 1)
    k = min(max(spec.experts_per_token, 1), n_experts) if n_experts > 1 else 1
    route_share = k / n_experts
    fit = fit_probabilities(targets, spec.n_layers, spec.neurons_per_layer)
    p_sorted = fit.probabilities()
    rng = np.random.default_rng(seed)
    layers = []
    for index in range(spec.n_layers):
        p_cond = p_sorted[index][rng.permutation(spec.neurons_per_layer)]
        counts = np.rint(p_cond * route_share * n_tokens).astype(np.int64)
        token_active = _token_active(p_cond, n_tokens, n_experts, k, rng)
        trace = None
        if trace_tokens > 0:
            trace = pack_masks(_draw_trace(p_cond, trace_tokens, n_experts, k, rng))
        layers.append(LayerProfile(index=index, counts=counts, n_tokens=n_tokens,
                                   token_active=token_active, trace=trace))
    meta = {
        "seed": seed,
        "trace_tokens": trace_tokens,
        "targets": asdict(targets),
        "fit": fit.as_meta(),
        "layer_active_target": [float(x) for x in
                                np.minimum(1.0, p_sorted).mean(axis=1) * route_share],
        "n_experts": n_experts,
        "experts_per_token": k,
        "stats_source": spec.stats.source if spec.stats else "",
        "method": "lognormal-quantile shape x per-layer scale; see powerbench.profiling.synthetic",
    }
    return ActivationProfile(model=spec.name, source="synthetic", dataset="synthetic",
                             n_tokens=n_tokens, layers=layers, meta=meta)
