"""Record-and-replay of an idealised predictor's active sets (the oracle's speed bound).

The oracle knows the true active set only by computing each layer's pre-activations
densely, so timing it as it runs measures a dense fc1 plus a sparse FFN: an accuracy
bound, not a speed bound. `ReplayedActiveSets` records the sets the oracle chooses during
one generation (the engine's warm-up) and hands the same sets back, in call order, on
every later generation that `rewind()` starts. A timed replayed run therefore pays for
the sparse operators alone: knowing the set is free, as the oracle assumes.

Replay is exact: a generation that starts from the same prompt with the same active
sets computes the same numbers, so it issues the same calls in the same order. A call
the recording does not cover (a longer generation) asks the oracle itself.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor


class ReplayedActiveSets:
    """Wraps an `ActivePredictor` whose `idealised` flag says its cost is not to be timed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.shape = inner.shape
        self.strategy = inner.strategy
        self.idealised = True
        self.recorded: list[list[Tensor]] = [[] for _ in range(inner.shape.n_layers)]
        self.cursor: list[int] | None = None  # None: recording
        self.replayed = 0  # calls answered from the recording
        self.asked = 0  # calls answered by the inner predictor

    def rewind(self) -> None:
        """The next generation replays (after the first one has recorded)."""
        if any(self.recorded):
            self.cursor = [0] * len(self.recorded)

    def predict(self, layer_idx: int, x: Tensor) -> Tensor:
        if self.cursor is not None:
            i = self.cursor[layer_idx]
            if i < len(self.recorded[layer_idx]):
                self.cursor[layer_idx] = i + 1
                self.replayed += 1
                return self.recorded[layer_idx][i]
        idx = self.inner.predict(layer_idx, x)
        self.asked += 1
        if self.cursor is None:
            self.recorded[layer_idx].append(idx)
        return idx

    def predict_mask(self, layer_idx: int, x: Tensor) -> Tensor:
        return self.inner.predict_mask(layer_idx, x)

    def check_compatible(self, spec: Any) -> None:
        self.inner.check_compatible(spec)

    def metrics(self, spec: Any, profile: Any) -> dict[str, float]:
        return self.inner.metrics(spec, profile)
