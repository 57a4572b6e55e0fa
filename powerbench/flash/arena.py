"""The flash engine's DRAM for weights: cache slots plus one layer of scratch slots.

`NeuronArena` holds the weights of every cache slot plus one layer's worth of scratch
slots (misses that are not cached: prompt calls, or more misses than free LRU slots),
one contiguous `[slots * cluster_neurons, d_model]` matrix per part, so the sparse
operators (`powerbench.ops`) read them in place with row ids `slot * cn + k`.
`PipelineTimes` adds up where a layer call's time went.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from powerbench.flash.layout import LayoutGeometry
from powerbench.flash.read_plan import aligned_buffer
from powerbench.ops import weights as ops_weights


@dataclass
class PipelineTimes:
    compute_s: float = 0.0  # sparse kernels
    io_wait_s: float = 0.0  # the caller blocked on reads
    io_active_s: float = 0.0  # wall time from submitting a call's reads to the last one landing
    install_s: float = 0.0  # copying read clusters from the staging buffer into the arena
    plan_s: float = 0.0  # cluster grouping, cache lookup, extent planning
    submit_s: float = 0.0  # handing the reads to the kernel / the I/O pool (io_submit: the
    # kernel's per-read work runs in the caller)
    calls: int = 0
    calls_with_reads: int = 0
    prefetched: int = 0  # clusters read ahead (lookahead), one layer before their call
    prefetch_used: int = 0  # of those, in the active set of the call they were read for

    def reset(self) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, 0.0 if name.endswith("_s") else 0)


class NeuronArena:
    """Weights (and relu fc1 biases) of `n_slots` cluster slots, neuron-major per part."""

    def __init__(self, g: LayoutGeometry, n_slots: int) -> None:
        self.g = g
        rows = max(n_slots, 1) * g.cluster_neurons
        # page-aligned (anonymous mmap, zero-filled): rows can be O_DIRECT read targets
        self.parts = [torch.from_numpy(aligned_buffer(rows * g.row_bytes)).view(g.torch_dtype)
                      .view(rows, g.d_model) for _ in range(g.n_parts)]
        self.b1 = torch.zeros(rows, dtype=torch.float32) if g.has_bias else None
        self.b1_np = None if self.b1 is None else self.b1.numpy()
        self.parts_np = [p.view(torch.uint8).numpy() for p in self.parts]  # shared memory
        self.flat_np = [p.reshape(-1) for p in self.parts_np]
        self.n_slots = n_slots

    @property
    def nbytes(self) -> int:
        n = sum(p.numel() * p.element_size() for p in self.parts)
        return n + (self.b1.numel() * 4 if self.b1 is not None else 0)

    def rows(self, slots: np.ndarray) -> np.ndarray:
        cn = self.g.cluster_neurons
        return (slots[:, None] * cn + np.arange(cn)[None, :]).ravel()

    def install(self, slots: np.ndarray, clusters: np.ndarray, stage: np.ndarray,
                b1: np.ndarray | None) -> None:
        """Copy staged clusters (uint8 stage, slot i = clusters[i]) into arena `slots`.

        Row copies through numpy byte views (torch's index_copy_ on fp16 is ~100x slower)."""
        n = int(slots.size)
        if n == 0:
            return
        g, cn, rb = self.g, self.g.cluster_neurons, self.g.row_bytes
        rows = self.rows(slots)
        raw = stage[: n * g.cluster_bytes].reshape(n, g.cluster_bytes)
        if g.bundled:
            body = raw[:, : cn * g.bundle_bytes].reshape(n, cn, g.n_parts, rb)
            for p, dst in enumerate(self.parts_np):
                dst[rows] = body[:, :, p, :].reshape(n * cn, rb)
        else:
            body = raw.reshape(n, g.n_parts, g.part_stride)[:, :, : cn * rb]
            body = body.reshape(n, g.n_parts, cn, rb)
            for p, dst in enumerate(self.parts_np):
                dst[rows] = body[:, p].reshape(n * cn, rb)
        self.set_b1(slots, clusters, b1)

    def set_b1(self, slots: np.ndarray, clusters: np.ndarray, b1: np.ndarray | None) -> None:
        """The fc1 biases of the clusters now held in `slots` (b1: the layer's, padded)."""
        if self.b1_np is not None and b1 is not None and slots.size:
            self.b1_np[self.rows(slots)] = b1[self.rows(clusters)]

    def ops_weights(self, b2: Tensor | None = None
                    ) -> ops_weights.ReluFFNWeights | ops_weights.GatedFFNWeights:
        """The arena as the sparse operators' weights (`b2`: a layer's fc2 bias, relu)."""
        if self.g.kind == "relu":
            return ops_weights.ReluFFNWeights(w1=self.parts[0], b1=self.b1,
                                              w2_t=self.parts[1], b2=b2)
        return ops_weights.GatedFFNWeights(w_gate=self.parts[0], w_up=self.parts[1],
                                           w_down_t=self.parts[2], kind=self.g.kind)
