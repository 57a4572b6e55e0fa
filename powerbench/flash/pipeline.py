"""One layer call of the flash engine: active set -> cache lookup -> reads || compute.

Per call: the predicted neurons are grouped into clusters; the cache says which are
resident. The missing clusters are submitted to the reader's I/O pool at once; with
`overlap` the resident neurons are computed while the reads run (PowerInfer-2's
I/O-compute pipeline), then the call waits for the reads, copies the new clusters into
their arena slots and computes the remainder; without it, it waits first and computes
everything in one kernel call. The two partial sums add up to the same FFN (fp32
accumulation, another summation order).

`NeuronArena` holds the weights of every cache slot plus one layer's worth of scratch
slots (misses that are not cached: prompt calls, or more misses than free LRU slots),
one contiguous `[slots * cluster_neurons, d_model]` matrix per part, so the sparse
operators (`powerbench.ops`) read them in place with row ids `slot * cn + k`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from powerbench.flash.cache import SegmentedNeuronCache
from powerbench.flash.layout import ALIGN, LayoutGeometry, LayoutHeader
from powerbench.flash.reader import DirectReader, ReadPlan, aligned_buffer
from powerbench.ops import weights as ops_weights
from powerbench.ops.interface import SparseOps


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


class LayerPipeline:
    """Runs layer calls against one file, one cache and one arena."""

    def __init__(self, header: LayoutHeader, cache: SegmentedNeuronCache, reader: DirectReader,
                 ops: SparseOps, b1: list[Tensor] | None, b2: list[Tensor] | None,
                 overlap: bool = True) -> None:
        g = header.geometry
        self.g, self.header, self.cache, self.reader = g, header, cache, reader
        self.overlap = overlap
        self.scratch_base = cache.n_slots
        self.arena = NeuronArena(g, cache.n_slots + g.n_clusters)
        self.kernel = ops.prepare_ffn(self.arena.ops_weights())
        # per layer: the same kernel with the layer's fc2 bias (added in the kernel)
        self.kernels_b2 = [self.kernel if b2 is None else
                           ops.prepare_ffn(self.arena.ops_weights(b2[layer]))
                           for layer in range(g.n_layers)]
        # fc1 biases padded to whole clusters (the arena copies them by cluster)
        pad = g.n_clusters * g.cluster_neurons - g.d_ffn
        self.b1 = None if b1 is None else [np.pad(b.float().numpy(), (0, pad)) for b in b1]
        self.b2 = b2
        # zero-copy: reads land in the arena rows themselves (rows block aligned, or no
        # O_DIRECT); else through a staging buffer and a copy
        self.zero_copy = g.row_bytes % ALIGN == 0 or not reader.direct
        self.stage_np = aligned_buffer(0 if self.zero_copy else g.n_clusters * g.cluster_bytes)
        self.times = PipelineTimes()
        # AIO through preallocated iocbs for the common read: one bundled cluster into its
        # arena rows (None: thread-pool reads, or reads that need a staging copy)
        self.scatter = None
        if self.zero_copy and g.bundled:
            cn, n_p = g.cluster_neurons, g.n_parts
            self.scatter = reader.scatter_reads(cn * n_p, g.row_bytes,
                                                np.tile(np.arange(n_p), cn), self.arena.flat_np)
            # byte offset in its part's arena of piece (k, p) of a cluster in slot 0
            self.piece_dest = np.repeat(np.arange(cn, dtype=np.int64) * g.row_bytes, n_p)

    # ---- loading ------------------------------------------------------------------------------
    def load_hot(self) -> None:
        """Read every layer's pinned clusters into their slots (once, at start-up)."""
        for layer, clusters in enumerate(self.cache.plan.hot):
            self.load(layer, clusters, self.cache.slot_of[layer, clusters])

    def load(self, layer: int, clusters: np.ndarray, slots: np.ndarray) -> None:
        """Read `clusters` of `layer` into arena `slots` (blocking)."""
        if clusters.size:
            self._read_submit(layer, clusters, slots).wait()
            self._install(layer, slots, clusters)

    def _read_submit(self, layer: int, clusters: np.ndarray, slots: np.ndarray):
        base = self.header.layer_offsets[layer]
        if self.zero_copy:
            b1 = None if self.b1 is None else self.b1[layer]
            self.arena.set_b1(slots, clusters, b1)
            scatter = self.scatter
            if (scatter is not None and clusters.size <= scatter.ctx.depth
                    and (clusters.size < 2 or np.diff(clusters).min() > 1)):
                # no two clusters adjacent in the file: one read per cluster, through the
                # preallocated AIO batch
                g = self.g
                dest = (slots * (g.cluster_neurons * g.row_bytes))[:, None] + self.piece_dest
                return self.reader.submit_scatter(scatter, base + clusters * g.cluster_bytes,
                                                  dest)
            if self.g.bundled and (clusters.size < 2 or np.diff(clusters).min() > 1):
                # no two clusters adjacent in the file: one read per cluster, built directly
                plan = self._bundled_plan(base, clusters, slots)
                return self.reader.submit_plan(plan, self.arena.flat_np)
            offs, lens, bufs, dests = self.g.row_extents(base, clusters, slots)
            return self.reader.submit(offs, lens, dests, self.arena.flat_np, bufs)
        offs, lens, dests = self.g.cluster_extents(base, clusters)
        return self.reader.submit(offs, lens, dests, self.stage_np)

    def _bundled_plan(self, base: int, clusters: np.ndarray, slots: np.ndarray) -> ReadPlan:
        """What `plan_reads(row_extents(...))` gives when no clusters are neighbours: read
        j = cluster j's bundles, scattered into its arena rows (one piece per part and
        neuron)."""
        g = self.g
        n, per = clusters.size, g.cluster_neurons * g.n_parts
        rows = self.arena.rows(slots)  # [n * cn], cluster-major
        return ReadPlan(
            op_offset=base + clusters * g.cluster_bytes,
            op_bytes=np.full(n, per * g.row_bytes, dtype=np.int64),
            op_first=np.arange(n, dtype=np.int64) * per,
            op_pieces=np.full(n, per, dtype=np.int64),
            piece_buf=np.tile(np.arange(g.n_parts, dtype=np.int64), rows.size),
            piece_dest=np.repeat(rows * g.row_bytes, g.n_parts),
            piece_len=np.full(n * per, g.row_bytes, dtype=np.int64))

    def _install(self, layer: int, slots: np.ndarray, clusters: np.ndarray) -> None:
        if not self.zero_copy:
            self.arena.install(slots, clusters, self.stage_np,
                               None if self.b1 is None else self.b1[layer])

    # ---- one call --------------------------------------------------------------------------------
    def _compute(self, x: Tensor, rows: np.ndarray, layer: int | None = None) -> Tensor | None:
        """The kernel over arena `rows`; with `layer`, the layer's fc2 bias added in it."""
        if rows.size == 0:
            return None
        t0 = time.perf_counter()
        kernel = self.kernel if layer is None else self.kernels_b2[layer]
        y = kernel(x, torch.from_numpy(rows))
        self.times.compute_s += time.perf_counter() - t0
        return y

    def run(self, layer: int, x: Tensor, ids: Tensor, cache_misses: bool = True,
            count: bool = True) -> Tensor:
        """y fp32 [n_tokens, d_model] = the FFN over neurons `ids` (int64, distinct).

        `cache_misses` False: missing clusters go to scratch only (a prompt's full sweep
        must not flush the cache). `count` False: not in the cache's hit counters.

        Planning is a few whole-array operations per call (no Python per neuron or read):
        one gather of the cache's slot map gives every cluster's slot (-1: missing); a call
        with no misses computes at once from those slots."""
        cn, t = self.g.cluster_neurons, self.times
        t0 = time.perf_counter()
        ids_np = ids.numpy() if ids.dtype == torch.int64 else ids.numpy().astype(np.int64)
        if cn == 1 and (ids_np.size < 2 or np.diff(ids_np).min() > 0):
            units, inv = ids_np, None  # sorted distinct ids are their own clusters
        else:
            units, inv = np.unique(ids_np // cn, return_inverse=True)
        slots, n_miss = self.cache.lookup_slots(layer, units, count=count)
        t.calls += 1
        if n_miss == 0:
            rows = slots if inv is None else slots[inv] * cn + ids_np % cn
            t.plan_s += time.perf_counter() - t0
            y = self._compute(x, rows, layer)
            return y if y is not None else self._zeros(x, layer)
        hit = slots >= 0
        miss_pos = np.flatnonzero(~hit)
        miss = units[miss_pos]  # ascending
        new = (self.cache.admit(layer, miss, count=count) if cache_misses
               else np.full(miss.size, -1, dtype=np.int64))
        spill = new < 0
        if spill.any():
            new[spill] = self.scratch_base + np.arange(int(np.count_nonzero(spill)))
        slots[miss_pos] = new
        t1 = time.perf_counter()
        pending = self._read_submit(layer, miss, new)
        t.submit_s += time.perf_counter() - t1
        t0 += time.perf_counter() - t1  # plan_s leaves the submission out
        if inv is None:
            rows, resident = slots, hit
        else:
            rows, resident = slots[inv] * cn + ids_np % cn, hit[inv]
        t.plan_s += time.perf_counter() - t0
        t.calls_with_reads += 1
        # the pipeline: the resident neurons (with the fc2 bias) while the reads run
        y = self._compute(x, rows[resident], layer) if self.overlap else None
        t1 = time.perf_counter()
        t.io_active_s += pending.wait()
        t2 = time.perf_counter()
        t.io_wait_s += t2 - t1
        self._install(layer, new, miss)
        t.install_s += time.perf_counter() - t2
        if y is None:
            y = self._compute(x, rows if not self.overlap else rows[~resident], layer)
        else:
            rest = self._compute(x, rows[~resident])
            if rest is not None:
                y = y + rest
        return y if y is not None else self._zeros(x, layer)

    def _zeros(self, x: Tensor, layer: int) -> Tensor:
        y = torch.zeros(x.shape[0], self.g.d_model, dtype=torch.float32)
        return y + self.b2[layer] if self.b2 is not None else y
