"""Synthetic activation profiles for shape-only models, fitted to published statistics.

The model (the published statistics give the targets):

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
a = 1 - token_sparsity, between the published points (model/spec.py SparsityStats): OPT-30B
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

import copy
from dataclasses import asdict, replace

import numpy as np

from powerbench.model.spec import ModelSpec
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile, pack_masks
from powerbench.profiling.synthetic_fit import SyntheticTargets, fit_probabilities

DENSE_DRAW_P = 0.5  # trace neurons at or above this probability are drawn densely


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


_last: dict[tuple, ActivationProfile] = {}  # the last profile drawn, its arrays read-only


def synthetic_profile(spec: ModelSpec, trace_tokens: int = 256, seed: int = 0,
                      n_tokens: int = 100_000) -> ActivationProfile:
    """A profile (source="synthetic") fitted to `spec.stats`; see the module docstring.

    Deterministic in its inputs, so the last one drawn is kept for the next call with the
    same inputs (the jobs of one sweep process share a model). Each call gets its own
    profile, layer and meta objects over shared READ-ONLY arrays: a caller may replace
    anything, but cannot change another caller's numbers in place. Only one profile is
    kept, dropped before the next is drawn, so memory peaks as without the memo."""
    key = (spec, trace_tokens, seed, n_tokens)  # ModelSpec is frozen; `extra` is unused
    if key not in _last:
        _last.clear()
        _last[key] = _read_only(_draw_profile(spec, trace_tokens, seed, n_tokens))
    kept = _last[key]
    return replace(kept, layers=[replace(layer) for layer in kept.layers],
                   meta=copy.deepcopy(kept.meta))


def _read_only(profile: ActivationProfile) -> ActivationProfile:
    for layer in profile.layers:
        for array in (layer.counts, layer.token_active, layer.trace):
            if array is not None:
                array.flags.writeable = False
    return profile


def _draw_profile(spec: ModelSpec, trace_tokens: int, seed: int,
                  n_tokens: int) -> ActivationProfile:
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
