"""Token-to-token overlap of active neurons, measured on consecutive-token traces.

A batch of r tokens (a prompt, or r decode rows) makes a sparse kernel read the UNION of
the tokens' active neurons. If tokens were independent draws from per-neuron
frequencies p_j, a neuron would be missing from the union of r tokens with probability
(1 - p_j)^r. Real consecutive tokens share their context, so the same neurons fire again:
the union grows more slowly.

The model (one parameter, `rho`): each neuron's activity is a stationary two-state Markov
chain over consecutive tokens with marginal p_j and lag-1 autocorrelation rho,

    P(on at t+1 | on at t)  = p + rho (1 - p)
    P(on at t+1 | off at t) = p (1 - rho)

so a neuron stays out of the union of r consecutive tokens with probability

    (1 - p) (1 - p (1 - rho))^(r - 1)                                   (`union_fraction`)

rho = 0 gives independent draws, rho = 1 a neuron that never changes state.

What `measure_overlap` reads: per-layer bool masks [T, N] of T consecutive tokens cut into
sequences of `seq_len` tokens (a profiler trace; windows never cross a sequence start).
It reports, pooled over layers and neurons:
- `persistence`: P(on at t+1 | on at t), and `lag1_rho` = (persistence - p) / (1 - p)
  with p the pooled active fraction (adjacent pairs only; pooling weights neurons by p,
  so with unequal p it overstates the chain's rho: a summary, not the fit);
- `union[r]`: the mean share of neurons in the union of r consecutive tokens (every
  window start inside a sequence), beside `independent[r]` = mean over neurons of
  1 - (1 - p_j)^r with p_j the neuron's frequency over the same tokens;
- `fitted_rho`: the rho whose `union_fraction` matches the measured union curve best
  (least squares on the union shares over the batch sizes), the one the simulator uses:
  the union, not the adjacent pair, is what a batch costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def union_fraction(p: np.ndarray, rows: int, rho: float = 0.0) -> np.ndarray:
    """Per neuron: probability of being in the union of `rows` consecutive tokens under
    the Markov model (module doc); rho = 0 is 1 - (1 - p)^rows."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"token overlap rho must be in [0, 1), got {rho}")
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    return 1.0 - (1.0 - p) * (1.0 - p * (1.0 - rho)) ** (rows - 1)


def _windows_union(masks: np.ndarray, seq_len: int, rows: int) -> tuple[float, int]:
    """(sum over windows of the union share, number of windows) of `rows` consecutive
    tokens, each window inside one sequence."""
    total, count = 0.0, 0
    for lo in range(0, masks.shape[0], seq_len):
        seq = masks[lo:lo + seq_len]
        if seq.shape[0] < rows:
            continue
        # running OR over `rows` tokens: cumulative counts, a window is active iff its
        # count difference is positive
        csum = np.concatenate([np.zeros((1, seq.shape[1]), dtype=np.int32),
                               np.cumsum(seq, axis=0, dtype=np.int32)])
        hits = (csum[rows:] - csum[:-rows]) > 0
        total += float(hits.mean(axis=1).sum())
        count += hits.shape[0]
    return total, count


@dataclass(frozen=True)
class OverlapStats:
    """Measured overlap of one model's trace (module doc)."""

    model: str
    layers: int
    tokens: int
    seq_len: int
    active: float  # pooled active fraction p
    persistence: float  # P(on at t+1 | on at t)
    lag1_rho: float
    fitted_rho: float
    union: dict[int, float] = field(default_factory=dict)  # measured union share per r
    independent: dict[int, float] = field(default_factory=dict)  # 1 - (1 - p_j)^r
    markov: dict[int, float] = field(default_factory=dict)  # union_fraction at fitted_rho

    def rows(self) -> list[dict]:
        """One row per batch size (the CSV the measurement writes)."""
        return [{"model": self.model, "layers": self.layers, "tokens": self.tokens,
                 "seq_len": self.seq_len, "active": self.active,
                 "persistence": self.persistence, "lag1_rho": self.lag1_rho,
                 "fitted_rho": self.fitted_rho, "batch": r,
                 "union_measured": self.union[r], "union_independent": self.independent[r],
                 "union_markov": self.markov[r]} for r in sorted(self.union)]


def _fit_rho(freqs: Sequence[np.ndarray], union: dict[int, float]) -> float:
    """rho in [0, 0.99] minimising the squared error of the mean union share (golden
    section on a unimodal one-parameter loss, then clipped)."""
    def loss(rho: float) -> float:
        err = 0.0
        for r, measured in union.items():
            model = float(np.mean([union_fraction(p, r, rho).mean() for p in freqs]))
            err += (model - measured) ** 2
        return err

    lo, hi = 0.0, 0.99
    g = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return float(np.clip((lo + hi) / 2.0, 0.0, 0.99))


def measure_overlap(model: str, masks: Sequence[np.ndarray], seq_len: int,
                    batch_sizes: Sequence[int] = BATCH_SIZES) -> OverlapStats:
    """Overlap statistics of per-layer bool masks [T, N] of consecutive tokens."""
    if not masks:
        raise ValueError(f"{model}: no layer traces to measure")
    tokens = int(masks[0].shape[0])
    if seq_len < 2 or tokens < 2:
        raise ValueError(f"{model}: need seq_len >= 2 and >= 2 trace tokens, got "
                         f"seq_len={seq_len}, tokens={tokens}")
    sizes = [r for r in batch_sizes if r <= min(seq_len, tokens)]
    on = on_next = pairs = active = cells = 0.0
    union_sum = {r: [0.0, 0] for r in sizes}
    freqs = []
    for layer in masks:
        layer = np.asarray(layer, dtype=bool)
        freqs.append(layer.mean(axis=0))
        active += float(layer.sum())
        cells += float(layer.size)
        for lo in range(0, tokens, seq_len):
            seq = layer[lo:lo + seq_len]
            if seq.shape[0] < 2:
                continue
            on += float(seq[:-1].sum())
            on_next += float((seq[:-1] & seq[1:]).sum())
            pairs += float(seq[:-1].size)
        for r in sizes:
            s, n = _windows_union(layer, seq_len, r)
            union_sum[r][0] += s
            union_sum[r][1] += n
    p = active / cells
    persistence = on_next / on if on > 0 else 0.0
    lag1 = (persistence - p) / (1.0 - p) if p < 1.0 else 0.0
    union = {r: s / n for r, (s, n) in union_sum.items() if n > 0}
    independent = {r: float(np.mean([union_fraction(f, r).mean() for f in freqs]))
                   for r in union}
    rho = _fit_rho(freqs, union)
    markov = {r: float(np.mean([union_fraction(f, r, rho).mean() for f in freqs]))
              for r in union}
    return OverlapStats(model=model, layers=len(masks), tokens=tokens, seq_len=seq_len,
                        active=p, persistence=persistence, lag1_rho=lag1, fitted_rho=rho,
                        union=union, independent=independent, markov=markov)
