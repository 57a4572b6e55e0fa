"""LLM in a Flash's sliding-window neuron cache (Alizadeh et al., arXiv 2312.11514, §3.1
"sliding window"): DRAM holds the FFN neurons that were active in the last `window`
tokens; a token loads only its active neurons that are not among them, and a neuron that
stays inactive for `window` tokens is dropped. DRAM the window does not need stays unused
(the paper reserves memory for the window, not a cache over the spare DRAM).

Per layer, a neuron is resident for token t when it was used by one of tokens
t - window .. t - 1 and, where the window's union exceeds the layer's `capacity`
(the DRAM the plan gives the layer), it is among the `capacity` most recently used ones
(the oldest are dropped first). Units are the plan's clusters (LLM in a Flash: 1 neuron).
"""

from __future__ import annotations

import numpy as np


class SlidingWindowCache:
    def __init__(self, n_layers: int, n_units: int, window: int, capacity: list[int]) -> None:
        if window < 1:
            raise ValueError(f"simulator.window_tokens must be >= 1, got {window}")
        if len(capacity) != n_layers or min(capacity, default=0) < 0:
            raise ValueError("sliding window: one capacity >= 0 per layer")
        self.window = int(window)
        self.capacity = [int(c) for c in capacity]
        self.last = np.full((n_layers, n_units), -np.iinfo(np.int64).max // 2, dtype=np.int64)
        self.token = np.zeros(n_layers, dtype=np.int64)  # tokens seen per layer

    def resident(self, layer: int, units: np.ndarray) -> np.ndarray:
        """Bool per unit of `units`: in DRAM for the layer's next token."""
        last = self.last[layer]
        recent = last >= self.token[layer] - self.window
        cap = self.capacity[layer]
        if int(recent.sum()) > cap:  # the window's union does not fit: keep the newest
            order = np.argsort(np.where(recent, -last, np.iinfo(np.int64).max), kind="stable")
            keep = np.zeros_like(recent)
            keep[order[:cap]] = True
            recent = keep
        return recent[np.asarray(units, dtype=np.int64)]

    def access(self, layer: int, units: np.ndarray) -> int:
        """One token of the layer computes `units`: returns how many were loaded (misses)
        and advances the window."""
        units = np.asarray(units, dtype=np.int64)
        misses = int((~self.resident(layer, units)).sum()) if units.size else 0
        self.last[layer, units] = self.token[layer]
        self.token[layer] += 1
        return misses
