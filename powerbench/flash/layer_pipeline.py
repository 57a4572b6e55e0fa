"""One layer call of the flash engine: active set -> cache lookup -> reads || compute.

Per call: the predicted neurons are grouped into clusters; the cache says which are
resident; the missing clusters' reads are submitted at once (with the compiled planner
and native AIO in the same foreign call as the planning); with `overlap` the resident
neurons are computed while the reads run (PowerInfer-2's I/O-compute pipeline), then the
call waits for the reads, copies the new clusters into their arena slots (unless they
landed there) and computes the remainder; without it, it waits first and computes
everything in one kernel call. The two partial sums add up to the same FFN (fp32
accumulation, another summation order). The weights live in a `NeuronArena`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import numpy as np
import torch
from torch import Tensor

from powerbench.flash import plan as flash_plan
from powerbench.flash.aio import AioContext, ScatterReads
from powerbench.flash.arena import NeuronArena, PipelineTimes
from powerbench.flash.layout import ALIGN, LayoutHeader
from powerbench.flash.plan import ADMIT, COUNT, SUBMIT, LayerPlanner
from powerbench.flash.read_plan import aligned_buffer, bundled_plan
from powerbench.flash.reader import DirectReader
from powerbench.flash.uring import UringScatter
from powerbench.ops.interface import SparseOps
from powerbench.solver.neuron_cache import SegmentedNeuronCache


def _int64_numpy(ids: Tensor) -> np.ndarray:
    return ids.numpy() if ids.dtype == torch.int64 else ids.numpy().astype(np.int64)


class LayerPipeline:
    """Runs layer calls against one file, one cache and one arena."""

    def __init__(self, header: LayoutHeader, cache: SegmentedNeuronCache, reader: DirectReader,
                 ops: SparseOps, b1: list[Tensor] | None, b2: list[Tensor] | None,
                 overlap: bool = True, planner: bool = True) -> None:
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
        # the per-call planning in compiled code (None: numpy, `planner=False` or no
        # compiler); the arena's fc1 biases then come from it too
        self.planner: LayerPlanner | None = None
        if planner and (lib := flash_plan.load()) is not None:
            self.planner = LayerPlanner(lib, cache, g.cluster_neurons, g.d_ffn,
                                        self.scratch_base, self.b1, self.arena.b1_np)
        # AIO through preallocated iocbs for the common read: one bundled cluster into its
        # arena rows (None: thread-pool reads, or reads that need a staging copy)
        self.scatter = None
        if self.zero_copy and g.bundled:
            cn, n_p = g.cluster_neurons, g.n_parts
            self.scatter = reader.scatter_reads(cn * n_p, g.row_bytes,
                                                np.tile(np.arange(n_p), cn), self.arena.flat_np)
            # byte offset in its part's arena of piece (k, p) of a cluster in slot 0
            self.piece_dest = np.repeat(np.arange(cn, dtype=np.int64) * g.row_bytes, n_p)
        self._submit = 0  # the planner submits a layer's reads itself (AIO, this thread)
        if (self.planner is not None and isinstance(self.scatter, ScatterReads)
                and not reader.submit_thread):
            self.planner.attach_reads(self.scatter, header.layer_offsets, g.cluster_bytes,
                                      g.cluster_neurons * g.row_bytes, self.piece_dest)
            self._submit = SUBMIT
        # lookahead reads (`prefetch`): a second AIO context, so that the next layer's
        # batch can be in flight beside this layer's
        self.ahead: ScatterReads | UringScatter | None = None
        self.ahead_ctx: AioContext | None = None
        self._ahead_layer = -1
        self._ahead_units = np.empty(0, dtype=np.int64)
        self._ahead_t0 = 0.0
        self._ahead_task = None  # the lookahead submission in an I/O thread
        self._io_until = 0.0  # end of the reads-outstanding time counted so far

    def enable_lookahead(self) -> bool:
        """Allocate the lookahead reads (AIO with zero-copy bundled clusters only)."""
        if self.scatter is None:
            return False
        if self.ahead is None:
            g, sc = self.g, self.scatter
            cn, n_p = g.cluster_neurons, g.n_parts
            bases = np.array([d.ctypes.data for d in self.arena.flat_np], dtype=np.int64)
            piece_buf = np.tile(np.arange(n_p), cn)
            ring = getattr(self.reader, "ring", None)
            if ring is not None:  # a second batch on the reader's ring
                self.ahead = UringScatter(ring, self.reader.fd, cn * n_p, g.row_bytes,
                                          piece_buf, bases, sc.ctx.depth)
            else:
                self.ahead_ctx = AioContext(sc.ctx.depth)
                self.ahead = ScatterReads(self.ahead_ctx, self.reader.fd, cn * n_p,
                                          g.row_bytes, piece_buf, bases)
        return True

    def close(self) -> None:
        if self._ahead_task is not None:
            task, self._ahead_task = self._ahead_task, None
            with suppress(OSError):
                task.result()
        if self.ahead is not None and not self.ahead.finished:
            with suppress(OSError):
                self.ahead.wait()
        if self.ahead_ctx is not None:
            self.ahead_ctx.close()
            self.ahead_ctx = None

    def prefetch(self, layer: int, ids: np.ndarray) -> int:
        """Start reading the clusters of predicted neurons `ids` (int64) of `layer` that
        are not resident into LRU slots of `layer` (admitted now, so the layer's call finds
        them resident and first waits for this batch). Returns the clusters submitted.
        A prediction's false positives cost reads and LRU slots, its misses are read on
        demand as before."""
        if (self.ahead is None or self._ahead_task is not None or not self.ahead.finished
                or layer >= self.g.n_layers):
            return 0
        cn = self.g.cluster_neurons
        units = ids if cn == 1 else np.unique(ids // cn)
        miss = units[self.cache.slot_of[layer][units] < 0][: self.ahead.ctx.depth]
        if miss.size == 0:
            return 0
        new = (self.cache.admit(layer, miss, count=False) if self.planner is None
               else self.planner.admit(layer, miss))
        keep = new >= 0
        miss, new = miss[keep], new[keep]
        if miss.size == 0:
            return 0
        g = self.g
        if self.b1 is not None:
            self.arena.set_b1(new, miss, self.b1[layer])
        self._ahead_t0 = time.perf_counter()
        dest = (new * (cn * g.row_bytes))[:, None] + self.piece_dest
        offsets = self.header.layer_offsets[layer] + miss * g.cluster_bytes
        if self.reader.submit_thread:  # the kernel's submission work in an I/O thread
            self._ahead_task = self.reader.pool.submit(self.ahead.submit, offsets, dest)
        else:
            self.ahead.submit(offsets, dest)
        self._ahead_layer, self._ahead_units = layer, miss
        st = self.reader.stats
        st.extents += int(miss.size)
        st.reads += int(miss.size)
        st.bytes_read += int(miss.size) * self.ahead.read_bytes
        self.times.prefetched += int(miss.size)
        return int(miss.size)

    def _collect_ahead(self, units: np.ndarray | None = None) -> None:
        """Wait for the lookahead batch (before any of its slots are computed or evicted)."""
        if self.ahead is None:
            return
        if self._ahead_task is not None:
            task, self._ahead_task = self._ahead_task, None
            task.result()
        if not self.ahead.finished:
            t0 = time.perf_counter()
            self.ahead.wait()
            t1 = time.perf_counter()
            self.times.io_wait_s += t1 - t0
            self._active(self._ahead_t0, t1)
        elif self._ahead_t0 > self._io_until:  # landed unseen (io_uring: reaped by
            self._active(self._ahead_t0, time.perf_counter())  # another batch's wait)
        if units is not None and self._ahead_units.size:
            self.times.prefetch_used += int(np.count_nonzero(
                np.isin(self._ahead_units, units, assume_unique=True)))

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

    def _read_submit(self, layer: int, clusters: np.ndarray, slots: np.ndarray,
                     b1_set: bool = False, adjacent: bool | None = None):
        """Start reading `clusters` (ascending) of `layer` into arena `slots`. `adjacent`:
        whether two of them are neighbours in the file (None: found out here)."""
        base = self.header.layer_offsets[layer]
        if self.zero_copy:
            if not b1_set:
                b1 = None if self.b1 is None else self.b1[layer]
                self.arena.set_b1(slots, clusters, b1)
            scatter = self.scatter
            if adjacent is None:
                adjacent = clusters.size > 1 and bool(np.diff(clusters).min() <= 1)
            if scatter is not None and clusters.size <= scatter.ctx.depth and not adjacent:
                # no two clusters adjacent in the file: one read per cluster, through the
                # preallocated AIO batch
                g = self.g
                dest = (slots * (g.cluster_neurons * g.row_bytes))[:, None] + self.piece_dest
                return self.reader.submit_scatter(scatter, base + clusters * g.cluster_bytes,
                                                  dest)
            if self.g.bundled and not adjacent:
                # no two clusters adjacent in the file: one read per cluster, built directly
                plan = bundled_plan(self.g, base, clusters, self.arena.rows(slots))
                return self.reader.submit_plan(plan, self.arena.flat_np)
            offs, lens, bufs, dests = self.g.row_extents(base, clusters, slots)
            return self.reader.submit(offs, lens, dests, self.arena.flat_np, bufs)
        offs, lens, dests = self.g.cluster_extents(base, clusters)
        return self.reader.submit(offs, lens, dests, self.stage_np)

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
            count: bool = True, ahead: Callable[[], Tensor | None] | None = None) -> Tensor:
        """y fp32 [n_tokens, d_model] = the FFN over neurons `ids` (int64, distinct).

        `cache_misses` False: missing clusters go to scratch only (a prompt's full sweep
        must not flush the cache). `count` False: not in the cache's hit counters.

        Planning is a few whole-array operations per call (no Python per neuron or read):
        one gather of the cache's slot map gives every cluster's slot (-1: missing); a call
        with no misses computes at once from those slots.

        `ahead`: the lookahead (a prediction of the next layer's neurons from this layer's
        input, or None); its missing clusters are read while this call computes
        (`prefetch`)."""
        cn, t = self.g.cluster_neurons, self.times
        t0 = time.perf_counter()
        ids_np = _int64_numpy(ids)
        if self.planner is not None:
            return self._run_planned(layer, x, ids_np, cache_misses, count, ahead, t0)
        if cn == 1 and (ids_np.size < 2 or np.diff(ids_np).min() > 0):
            units, inv = ids_np, None  # sorted distinct ids are their own clusters
        else:
            units, inv = np.unique(ids_np // cn, return_inverse=True)
        self._land_ahead(layer)
        slots, n_miss = self.cache.lookup_slots(layer, units, count=count)
        t.calls += 1
        if n_miss == 0:
            rows = slots if inv is None else slots[inv] * cn + ids_np % cn
            t.plan_s += time.perf_counter() - t0
            return self._all_resident(layer, x, rows, ahead, units)
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
        self._ahead_step(ahead, layer, units)
        # the pipeline: the resident neurons (with the fc2 bias) while the reads run
        y = self._compute(x, rows[resident], layer) if self.overlap else None
        return self._finish(layer, x, pending, new, miss, y,
                            rows[~resident] if self.overlap else rows)

    def _run_planned(self, layer: int, x: Tensor, ids_np: np.ndarray, cache_misses: bool,
                     count: bool, ahead: Callable[[], Tensor | None] | None, t0: float
                     ) -> Tensor:
        """`run` with the compiled planner (same policy, same reads, same kernels)."""
        t, p = self.times, self.planner
        assert p is not None
        self._land_ahead(layer)
        if not ids_np.flags.c_contiguous:
            ids_np = np.ascontiguousarray(ids_np)
        flags = ADMIT * cache_misses | COUNT * count | self._submit
        if self.scatter is not None and not self.scatter.finished:
            self.reader._last.wait()  # a batch left by a call that raised
        try:
            n_miss, n = p.step(layer, ids_np, flags)
        except ValueError:  # not ascending: the same neurons, sorted
            ids_np = np.unique(ids_np)
            n_miss, n = p.step(layer, ids_np, flags)
        t.calls += 1
        units = p.units[: int(p.state[3])]
        if n_miss == 0:
            rows = p.rows[:n]
            t.plan_s += time.perf_counter() - t0
            return self._all_resident(layer, x, rows, ahead, units)
        miss, new, st = p.miss_units[:n_miss], p.miss_slots[:n_miss], p.state
        if st[4]:  # submitted by the planner (st[4] < 0: io_submit failed)
            t1, t2 = st[6] * 1e-9, st[7] * 1e-9
            pending = self.reader.submitted_scatter(self.scatter, int(st[4]), int(st[5]), t1)
        else:
            t1 = time.perf_counter()
            pending = self._read_submit(layer, miss, new, b1_set=True, adjacent=p.adjacent)
            t2 = time.perf_counter()
        t.submit_s += t2 - t1
        t0 += t2 - t1  # plan_s leaves the submission out
        resident = p.resident[:n]
        rows_hit, rows_miss = ((p.rows[:n][resident], p.rows[:n][~resident]) if self.overlap
                               else (p.rows[:n].copy(),) * 2)
        miss, new = miss.copy(), new.copy()
        t.plan_s += time.perf_counter() - t0
        t.calls_with_reads += 1
        self._ahead_step(ahead, layer, units)
        y = self._compute(x, rows_hit, layer) if self.overlap else None
        return self._finish(layer, x, pending, new, miss, y, rows_miss)

    def _finish(self, layer: int, x: Tensor, pending: Any, new: np.ndarray, miss: np.ndarray,
                y: Tensor | None, rest_rows: np.ndarray) -> Tensor:
        """The end of a call with reads: wait for them, install the clusters they brought,
        then compute `rest_rows` (the read neurons; every row when nothing was computed
        while the reads ran: no pipeline, or no resident rows) and add it to `y`."""
        t = self.times
        t1 = time.perf_counter()
        pending.wait()
        t2 = time.perf_counter()
        self._active(pending.started, max(pending.finished, default=t2))
        t.io_wait_s += t2 - t1
        self._install(layer, new, miss)
        t.install_s += time.perf_counter() - t2
        if y is None:
            y = self._compute(x, rest_rows, layer)
        else:
            rest = self._compute(x, rest_rows)
            if rest is not None:
                y = y + rest
        return y if y is not None else self._zeros(x, layer)

    def _active(self, start: float, end: float) -> None:
        """Add [start, end] (reads outstanding) to `io_active_s`, counting time already
        covered by an earlier interval once (a lookahead batch overlaps the demand one)."""
        self.times.io_active_s += max(0.0, end - max(start, self._io_until))
        self._io_until = max(self._io_until, end)

    def _all_resident(self, layer: int, x: Tensor, rows: np.ndarray,
                      ahead: Callable[[], Tensor | None] | None, units: np.ndarray) -> Tensor:
        """A call with no reads: the lookahead step, then every row at once."""
        self._ahead_step(ahead, layer, units)
        y = self._compute(x, rows, layer)
        return y if y is not None else self._zeros(x, layer)

    def _land_ahead(self, layer: int) -> None:
        """Before a call of `layer` admits anything, the lookahead batch lands (an admission
        may evict a slot it read into, and a demand read there would race it); a batch for
        another layer (a call was skipped) is done with."""
        if self._ahead_layer >= 0:
            self._collect_ahead()
            if self._ahead_layer != layer:
                self._ahead_layer = -1

    def _ahead_step(self, ahead: Callable[[], Tensor | None] | None, layer: int,
                    units: np.ndarray) -> None:
        """This layer's lookahead reads land (before any of its rows are computed), then
        the next layer's predicted misses are submitted (one lookahead batch in flight)."""
        if self._ahead_layer == layer:
            self._collect_ahead(units)
            self._ahead_layer = -1
        if ahead is None or self.ahead is None or layer + 1 >= self.g.n_layers:
            return
        ids = ahead()
        if ids is None:
            return
        t0 = time.perf_counter()
        ids_np = _int64_numpy(ids)
        self.prefetch(layer + 1, ids_np)
        self.times.submit_s += time.perf_counter() - t0

    def _zeros(self, x: Tensor, layer: int) -> Tensor:
        y = torch.zeros(x.shape[0], self.g.d_model, dtype=torch.float32)
        return y + self.b2[layer] if self.b2 is not None else y
