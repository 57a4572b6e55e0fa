"""The activation profile: what the profiler measures (or the synthesiser draws).

Every later stage reads this: predictors train on the (hidden, mask) samples,
placement uses per-neuron frequencies, the simulator replays per-token masks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

ProfileSource = Literal["measured", "synthetic"]


def coverage_share(counts: np.ndarray, coverage: float = 0.8) -> float:
    """Smallest share of neurons whose activations cover `coverage` of all activations.

    PowerInfer's skew statistic ("26% of neurons cover 80% of activations").
    """
    counts = np.asarray(counts, dtype=np.float64).ravel()
    total = counts.sum()
    if counts.size == 0 or total <= 0:
        return 0.0
    ordered = np.sort(counts)[::-1]
    needed = int(np.searchsorted(np.cumsum(ordered), coverage * total - 1e-9 * total) + 1)
    return min(needed, counts.size) / counts.size


@dataclass
class LayerProfile:
    """One FFN block.

    counts[n]           how many of the profiled tokens activated neuron n
    token_active[t]     active fraction of the block's neurons for token t
    hidden[s, d_model]  FFN input hidden states (measured profiles only; predictor training)
    masks[s, neurons]   bool active masks for the same samples (synthetic: drawn traces)
    """

    index: int
    counts: np.ndarray
    n_tokens: int
    token_active: np.ndarray
    hidden: np.ndarray | None = None
    masks: np.ndarray | None = None

    @property
    def n_neurons(self) -> int:
        return int(self.counts.shape[0])

    @property
    def frequency(self) -> np.ndarray:
        """Per-neuron activation probability (PowerInfer's impact v_n)."""
        return self.counts.astype(np.float64) / max(self.n_tokens, 1)

    @property
    def active_fraction(self) -> float:
        return float(self.counts.sum()) / max(self.n_tokens * self.n_neurons, 1)

    @property
    def sparsity(self) -> float:
        return 1.0 - self.active_fraction

    def skew(self, coverage: float = 0.8) -> float:
        return coverage_share(self.counts, coverage)


@dataclass
class ActivationProfile:
    model: str
    source: ProfileSource
    dataset: str
    n_tokens: int
    layers: list[LayerProfile]
    meta: dict = field(default_factory=dict)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def frequencies(self) -> np.ndarray:
        """[n_layers, neurons] activation probabilities."""
        return np.stack([layer.frequency for layer in self.layers])

    @property
    def sparsity(self) -> float:
        """Mean per-token inactive fraction over all FFN neurons."""
        return float(np.mean([layer.sparsity for layer in self.layers]))

    def block_skew(self, coverage: float = 0.8) -> float:
        """Mean over layers of the share of one block's neurons covering `coverage`."""
        return float(np.mean([layer.skew(coverage) for layer in self.layers]))

    def model_skew(self, coverage: float = 0.8) -> float:
        """Share of all the model's FFN neurons covering `coverage` of all activations."""
        return coverage_share(np.concatenate([layer.counts for layer in self.layers]), coverage)

    def summary(self) -> dict[str, float]:
        return {
            "ffn_sparsity": self.sparsity,
            "ffn_skew_top80_share": self.block_skew(0.8),
            "ffn_model_skew_top80_share": self.model_skew(0.8),
            "profile_tokens": float(self.n_tokens),
        }
