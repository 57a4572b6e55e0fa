"""The flash engine's per-call planning in compiled code (`csrc/flash_plan.cpp`, ctypes).

`LayerPlanner.plan` = `SegmentedNeuronCache.lookup_slots` + `admit` (the same policy and
counters) + every active neuron's arena row + the admitted clusters' fc1 biases, in one
call with no Python per neuron: ~50 numpy operations per layer call before, each a few
microseconds on the 2-vCPU VM. With `attach_reads` (native AIO, bundled clusters) the same
call also submits the misses' reads (`step`), so a layer's reads start one foreign call
after its active set is known; the rows and biases are worked out while they fly.
Recency lives in per-layer linked lists of LRU slots (admission in O(misses), not a scan
of the layer's LRU slots), built from the cache's stamps by `sync`. The library is compiled on first use with the system C++
compiler into the cache (`<cache>/flash_plan/<source hash>.so`); where that fails,
`load()` returns None and the engine keeps the numpy path.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from powerbench.solver.neuron_cache import SegmentedNeuronCache

log = logging.getLogger(__name__)
SOURCE = Path(__file__).resolve().parent / "csrc" / "flash_plan.cpp"
_lib: ctypes.CDLL | None = None
_tried = False

_P = ctypes.c_void_p
_I = ctypes.c_int64


def load() -> ctypes.CDLL | None:
    """The compiled planner, built if needed; None without a C++ compiler."""
    global _lib, _tried
    if _lib is not None or _tried:
        return _lib
    _tried = True
    from powerbench.paths import cache_dir

    src = SOURCE.read_bytes()
    out = cache_dir() / "flash_plan" / f"{hashlib.sha256(src).hexdigest()[:16]}.so"
    if not out.exists():
        cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
        if cxx is None:
            log.warning("no C++ compiler: the flash engine plans with numpy")
            return None
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            tmp_so = Path(tmp) / out.name
            try:
                subprocess.run([cxx, "-O2", "-shared", "-fPIC", "-std=c++17", str(SOURCE),
                                "-o", str(tmp_so)], check=True, capture_output=True)
            except (OSError, subprocess.CalledProcessError) as err:
                log.warning("building %s failed (%s): the flash engine plans with numpy",
                            SOURCE.name, err)
                return None
            os.replace(tmp_so, out)  # atomic: a concurrent build leaves one whole file
    lib = ctypes.CDLL(str(out))
    lib.pb_flash_step.restype = ctypes.c_int64
    lib.pb_flash_step.argtypes = [_P, _I, _P, _I, _I]
    lib.pb_flash_admit.restype = ctypes.c_int64
    lib.pb_flash_admit.argtypes = [_P, _I, _P, _I, _P]
    lib.pb_aio_reap.restype = ctypes.c_int64
    lib.pb_aio_reap.argtypes = [ctypes.c_uint64, _I, _I, _P, _I, _I]
    _lib = lib
    return lib


class _Planner(ctypes.Structure):
    """`struct PbPlanner` (csrc/flash_plan.cpp): pointers as integers."""

    _fields_ = [(name, ctypes.c_int64) for name in (
        "slot_of", "units", "owner", "last_used", "lru_prev", "lru_next", "lru_head",
        "lru_tail", "n_hot", "scratch_base", "cn", "state", "units_out", "rows", "resident",
        "miss_units", "miss_slots", "b1_layers", "b1_arena", "counts", "aio_handle",
        "nr_submit", "iocbs", "iocb_ptrs", "iov", "n_pieces", "piece_base", "piece_dest",
        "slot_bytes", "layer_offsets", "cluster_bytes", "depth")]


ADMIT, COUNT, SUBMIT = 1, 2, 4


class LayerPlanner:
    """Planning against one `SegmentedNeuronCache` (whose arrays it updates in place) for
    an arena whose scratch slots start at `scratch_base`; output buffers preallocated for
    `d_ffn` neurons. While a planner is in use, the cache's LRU state changes only through
    it (`plan`, `step`, `admit`); after changes made elsewhere (`preload`) call `sync`."""

    COUNTS = ("lookups", "hot_hits", "lru_hits", "misses", "admitted", "evicted", "bypassed")

    def __init__(self, lib: ctypes.CDLL, cache: SegmentedNeuronCache, cluster_neurons: int,
                 d_ffn: int, scratch_base: int, b1_layers: list[np.ndarray] | None,
                 b1_arena: np.ndarray | None) -> None:
        self.lib, self.step_fn = lib, lib.pb_flash_step
        self.cache, self.cn, self.scratch_base = cache, cluster_neurons, scratch_base
        for name in ("slot_of", "owner", "last_used"):
            arr = getattr(cache, name)
            if not (arr.dtype == np.int64 and arr.flags.c_contiguous):
                raise ValueError(f"cache.{name} must be contiguous int64")
        n_units, n_layers = cache.units_per_layer, cache.n_layers
        self.units = np.empty(n_units, dtype=np.int64)
        self.rows = np.empty(d_ffn, dtype=np.int64)
        self.resident = np.empty(d_ffn, dtype=np.bool_)
        self.miss_units = np.empty(n_units, dtype=np.int64)
        self.miss_slots = np.empty(n_units, dtype=np.int64)
        self.adjacent = False  # the last call's misses hold two clusters adjacent in the file
        # tick, call start, misses adjacent, clusters looked up, reads submitted, accepted,
        # submission start and end (CLOCK_MONOTONIC ns: time.perf_counter's clock on Linux)
        self.state = np.zeros(8, dtype=np.int64)
        self.counts = np.zeros(len(self.COUNTS), dtype=np.int64)
        self.lru_prev = np.full(cache.n_slots, -1, dtype=np.int64)
        self.lru_next = np.full(cache.n_slots, -1, dtype=np.int64)
        self.lru_head = np.full(n_layers, -1, dtype=np.int64)
        self.lru_tail = np.full(n_layers, -1, dtype=np.int64)
        self._b1_layers = b1_layers  # kept alive
        b1_ptrs = None if b1_layers is None else np.array([b.ctypes.data for b in b1_layers],
                                                          dtype=np.int64)
        self._b1_ptrs = b1_ptrs
        self._reads_alive: tuple = ()
        addr = lambda a: 0 if a is None else int(a.ctypes.data)  # noqa: E731
        self.c = _Planner(
            slot_of=addr(cache.slot_of), units=n_units, owner=addr(cache.owner),
            last_used=addr(cache.last_used), lru_prev=addr(self.lru_prev),
            lru_next=addr(self.lru_next), lru_head=addr(self.lru_head),
            lru_tail=addr(self.lru_tail), n_hot=cache.n_hot, scratch_base=scratch_base,
            cn=cluster_neurons, state=addr(self.state), units_out=addr(self.units),
            rows=addr(self.rows), resident=addr(self.resident),
            miss_units=addr(self.miss_units), miss_slots=addr(self.miss_slots),
            b1_layers=addr(b1_ptrs), b1_arena=addr(b1_arena), counts=addr(self.counts))
        self._c = ctypes.byref(self.c)
        self.sync()

    def sync(self) -> None:
        """Rebuild the LRU lists from the cache's stamps: each layer's LRU slots ordered by
        (last_used, slot), least recent first."""
        c = self.cache
        self.lru_prev[:] = -1
        self.lru_next[:] = -1
        for layer, (a, b) in enumerate(c.lru_range):
            if b <= a:
                self.lru_head[layer] = self.lru_tail[layer] = -1
                continue
            order = a + np.argsort(c.last_used[a:b], kind="stable")  # ties: lower slot
            self.lru_next[order[:-1]] = order[1:]
            self.lru_prev[order[1:]] = order[:-1]
            self.lru_head[layer], self.lru_tail[layer] = order[0], order[-1]

    def attach_reads(self, reads: Any, layer_offsets: np.ndarray, cluster_bytes: int,
                     slot_bytes: int, piece_dest: np.ndarray) -> None:
        """Let `step` submit the misses' reads through `reads` (a `ScatterReads`: one
        bundled cluster per read, its pieces into the arena at slot * `slot_bytes` +
        `piece_dest[p]`), cluster u of layer l at `layer_offsets[l] + u * cluster_bytes`."""
        offsets = np.ascontiguousarray(layer_offsets, dtype=np.int64)
        dest = np.ascontiguousarray(piece_dest, dtype=np.int64)
        base = np.ascontiguousarray(reads.piece_base, dtype=np.int64)
        self._reads_alive = (reads, offsets, dest, base)
        c = self.c
        c.aio_handle, c.nr_submit = reads.ctx.handle, reads.ctx.nr_submit
        c.iocbs, c.iocb_ptrs, c.iov = (reads.cbs.ctypes.data, reads.ptrs.ctypes.data,
                                       reads.iov.ctypes.data)
        c.n_pieces, c.piece_base, c.piece_dest = reads.n_pieces, base.ctypes.data, \
            dest.ctypes.data
        c.slot_bytes, c.layer_offsets = slot_bytes, offsets.ctypes.data
        c.cluster_bytes, c.depth = cluster_bytes, reads.ctx.depth

    def step(self, layer: int, ids: np.ndarray, flags: int = ADMIT | COUNT
             ) -> tuple[int, int]:
        """ids: int64 ascending distinct (contiguous). Returns (n_miss, n_ids); the results
        are in `rows[:n_ids]`, `resident[:n_ids]`, `units[:state[3]]`,
        `miss_units[:n_miss]`, `miss_slots[:n_miss]` (valid until the next call); with
        SUBMIT in `flags`, `state[4]` = reads submitted (0: none, the caller reads them;
        < 0: -errno of a failed io_submit after `state[5]` reads went in)."""
        c = self.cache
        st = self.state
        st[0] = c.tick
        n = int(ids.size)
        n_miss = self.step_fn(self._c, layer, ids.ctypes.data, n, flags)
        if n_miss == -2:
            raise ValueError("LayerPlanner.plan: ids must be ascending and distinct")
        c.tick = int(st[0])
        c._call_start = int(st[1])
        self.adjacent = bool(st[2])
        return int(n_miss), n

    def plan(self, layer: int, ids: np.ndarray, admit: bool = True, count: bool = True
             ) -> tuple[int, int]:
        """`step` without submitting reads."""
        return self.step(layer, ids, ADMIT * admit | COUNT * count)

    @property
    def n_units(self) -> np.ndarray:
        return self.state[3:4]

    def admit(self, layer: int, units: np.ndarray) -> np.ndarray:
        """A lookahead's admission (`SegmentedNeuronCache.admit` without counting):
        each of `units` (missing, ascending)'s slot, -1 where none was free of the
        current call."""
        units = np.ascontiguousarray(units, dtype=np.int64)
        out = np.full(units.size, -1, dtype=np.int64)
        self.state[0], self.state[1] = self.cache.tick, self.cache._call_start
        self.lib.pb_flash_admit(self._c, layer, units.ctypes.data, units.size,
                                out.ctypes.data)
        self.cache.tick = int(self.state[0])
        return out

    def flush_counts(self) -> None:
        """Add the counters gathered since the last flush to the cache's `stats`."""
        if self.counts.any():
            s = self.cache.stats
            for name, v in zip(self.COUNTS, self.counts.tolist(), strict=True):
                setattr(s, name, getattr(s, name) + v)
            self.counts[:] = 0
