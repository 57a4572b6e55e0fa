"""The activation profile: what the profiler measures (or the synthesiser draws).

Every later stage reads this: predictors train on the (hidden, mask) samples,
placement uses per-neuron frequencies, the simulator replays per-token masks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

ProfileSource = Literal["measured", "synthetic"]

# Bit order of every packed mask (np.packbits along the neuron axis): neuron n is bit
# n % 8 of byte n // 8.
BITORDER: Literal["little"] = "little"


def pack_masks(masks: np.ndarray) -> np.ndarray:
    """bool [rows, neurons] -> uint8 [rows, ceil(neurons / 8)] (8x smaller)."""
    return np.packbits(np.asarray(masks, dtype=bool), axis=-1, bitorder=BITORDER)


def unpack_masks(packed: np.ndarray, n_neurons: int) -> np.ndarray:
    """Inverse of `pack_masks`: uint8 [rows, ceil(neurons / 8)] -> bool [rows, neurons]."""
    bits = np.unpackbits(packed, axis=-1, count=n_neurons, bitorder=BITORDER)
    return bits.view(bool)  # the bits are 0 or 1: a bool view, no copy


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

    counts[n]           how many of the profiled tokens activated neuron n (int64)
    token_active[t]     active fraction of the block's neurons for token t (float32)
    hidden[s, d_model]  FFN input hidden states, fp16 (measured profiles only; predictor
                        training). Sample s sits at the same token position in every
                        layer: `ActivationProfile.sample_positions[s]`.
    masks[s, neurons]   bool active masks for the same samples (measured profiles only;
                        synthetic profiles have no hidden states, so no samples: None).
    trace[t, bytes]     `trace_tokens` CONSECUTIVE per-token active masks, bit-packed with
                        `pack_masks` (uint8 [T, ceil(neurons / 8)]); read them with
                        `trace_masks()`. Measured: the first T profiled tokens; synthetic:
                        T tokens drawn from the fitted per-neuron probabilities. Packed
                        because OPT-175B's 96 x 49152 neurons x 256 tokens would be 1.2 GB
                        of bools (151 MB packed).
    """

    index: int
    counts: np.ndarray
    n_tokens: int
    token_active: np.ndarray
    hidden: np.ndarray | None = None
    masks: np.ndarray | None = None
    trace: np.ndarray | None = None

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

    @property
    def trace_tokens(self) -> int:
        return 0 if self.trace is None else int(self.trace.shape[0])

    def trace_masks(self, start: int = 0, stop: int | None = None) -> np.ndarray | None:
        """bool [tokens, neurons] per-token masks of trace tokens [start, stop) (unpacked)."""
        if self.trace is None:
            return None
        return unpack_masks(self.trace[start:stop], self.n_neurons)

    def trace_unions(self, groups: np.ndarray) -> np.ndarray | None:
        """Bit-packed uint8 [G, ceil(neurons / 8)]: per group of trace tokens (int
        [G, width] indices) the union of their masks, taken on the packed bits (8x less
        to read than the bools); `unpack_masks` for bools."""
        if self.trace is None:
            return None
        return np.bitwise_or.reduce(self.trace[groups], axis=1)


@dataclass
class ActivationProfile:
    model: str
    source: ProfileSource
    dataset: str
    n_tokens: int
    layers: list[LayerProfile]
    meta: dict = field(default_factory=dict)
    # Global token index (position in the profiled token stream) of each (hidden, mask)
    # sample; shared by all layers. None when there are no samples (synthetic).
    sample_positions: np.ndarray | None = None

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def trace_tokens(self) -> int:
        """Number of consecutive per-token masks kept (same in every layer)."""
        return min((layer.trace_tokens for layer in self.layers), default=0)

    def trace_step(self, t: int) -> list[np.ndarray]:
        """Trace token t's bool active mask in every layer (what the simulator replays)."""
        masks = [layer.trace_masks(t, t + 1) for layer in self.layers]
        if any(m is None for m in masks):
            raise ValueError("profile has no traces")
        return [m[0] for m in masks]  # type: ignore[index]

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
