"""Active sets replayed from a profile's per-token trace: a stand-in predictor for benchmarks.

Random (synthetic) weights do not activate like trained ones, so benchmarks that run them
take each decode step's active set from the synthetic activation profile's trace instead:
step t gets trace token t's set in every layer. Every engine of one benchmark shares one
step counter (`with_lookahead` views), so they all see the same sets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class TraceActiveSets:
    """A predictor that replays a profile's per-token trace: decode step t gets trace token
    t's active set in every layer (the step advances after the last layer)."""

    strategy = "trace"
    idealised = False

    def __init__(self, profile: Any, lookahead_recall: float = 1.0,
                 lookahead_precision: float = 1.0, seed: int = 0) -> None:
        self.n_layers = profile.n_layers
        self.sets = [[torch.from_numpy(np.flatnonzero(m)) for m in layer.trace_masks()]
                     for layer in profile.layers]
        self.n_tokens = len(self.sets[0])
        self.step = 0
        self.profile = profile
        if not (0.0 <= lookahead_recall <= 1.0 and 0.0 < lookahead_precision <= 1.0):
            raise ValueError("lookahead recall in [0, 1], precision in (0, 1]")
        self.lookahead_recall = lookahead_recall
        self.lookahead_precision = lookahead_precision
        self.seed = seed
        self.ahead_sets: list[list[torch.Tensor]] | None = None
        if lookahead_recall < 1.0 or lookahead_precision < 1.0:
            self.ahead_sets = self._draw_lookahead(profile)

    def _draw_lookahead(self, profile: Any) -> list[list[torch.Tensor]]:
        """Per layer and step, drawn up front (the draws are the stand-in's, not the
        engine's, cost): each true neuron kept with probability `lookahead_recall`; false
        positives to `lookahead_precision`, drawn among the inactive neurons in proportion
        to their profiled activation frequency (a mispredicted neuron is more likely one
        that is often active, i.e. cached)."""
        r, p = self.lookahead_recall, self.lookahead_precision
        freq = np.asarray(profile.frequencies(), dtype=np.float64) + 1e-12
        out = []
        for layer, sets in enumerate(self.sets):
            rng = np.random.default_rng((self.seed, layer))
            row = []
            for true in sets:
                t = true.numpy()
                kept = t[rng.random(t.size) < r]
                n_fp = int(round(kept.size * (1.0 / p - 1.0)))
                if n_fp:
                    w = freq[layer].copy()
                    w[t] = 0.0
                    fp = rng.choice(w.size, size=min(n_fp, int(np.count_nonzero(w))),
                                    replace=False, p=w / w.sum())
                    kept = np.union1d(kept, fp)
                row.append(torch.from_numpy(np.sort(kept).astype(np.int64)))
            out.append(row)
        return out

    def seek(self, step: int) -> None:
        self.step = step

    def predict(self, layer_idx: int, x: torch.Tensor) -> torch.Tensor:
        ids = self.sets[layer_idx][self.step % self.n_tokens]
        if layer_idx == self.n_layers - 1:
            self.step += 1
        return ids

    def lookahead(self, layer_idx: int, x: torch.Tensor) -> torch.Tensor | None:
        """A stand-in for a lookahead predictor (layer `layer_idx`'s neurons guessed from
        the previous layer's input) of the given recall and precision (`_draw_lookahead`);
        recall = precision = 1: the oracle, the trace's own set."""
        if layer_idx >= self.n_layers:
            return None
        t = self.step % self.n_tokens
        if self.ahead_sets is None:
            return self.sets[layer_idx][t]
        return self.ahead_sets[layer_idx][t]

    def with_lookahead(self, recall: float, precision: float | None = None) -> Any:
        """A predictor sharing these sets and this step counter whose lookahead has the
        given recall and precision (default: precision = recall, a same-size guess)."""
        return _LookaheadView(self, recall, recall if precision is None else precision)

    def mean_active(self) -> float:
        return float(np.mean([[s.numel() for s in layer] for layer in self.sets]))


class _LookaheadView:
    """`TraceActiveSets.with_lookahead`: predict/seek go to the parent (one step counter
    for every engine of the benchmark), lookahead from this view's own draws."""

    strategy = "trace"
    idealised = False

    def __init__(self, parent: TraceActiveSets, recall: float, precision: float) -> None:
        self.parent = parent
        self.n_layers = parent.n_layers
        self.lookahead_recall, self.lookahead_precision = recall, precision
        self.ahead_sets = None
        if recall < 1.0 or precision < 1.0:
            prev = (parent.lookahead_recall, parent.lookahead_precision)
            parent.lookahead_recall, parent.lookahead_precision = recall, precision
            try:
                self.ahead_sets = parent._draw_lookahead(parent.profile)
            finally:
                parent.lookahead_recall, parent.lookahead_precision = prev

    def seek(self, step: int) -> None:
        self.parent.seek(step)

    def predict(self, layer_idx: int, x: torch.Tensor) -> torch.Tensor:
        return self.parent.predict(layer_idx, x)

    def lookahead(self, layer_idx: int, x: torch.Tensor) -> torch.Tensor | None:
        p = self.parent
        if layer_idx >= p.n_layers:
            return None
        t = p.step % p.n_tokens
        return (p.sets if self.ahead_sets is None else self.ahead_sets)[layer_idx][t]
