"""The flash engine's per-call planning in compiled code (`csrc/flash_plan.cpp`, ctypes).

`LayerPlanner.plan` = `SegmentedNeuronCache.lookup_slots` + `admit` (the same policy and
counters) + every active neuron's arena row + the admitted clusters' fc1 biases, in one
call with no Python per neuron: ~50 numpy operations per layer call before, each a few
microseconds on the 2-vCPU VM. The library is compiled on first use with the system C++
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
    f = lib.pb_flash_plan
    f.restype = ctypes.c_int64
    f.argtypes = [_P, _I, _I, _P, _P, _P, _P, _I, _I, _I, ctypes.c_int, _I, _P, _P, _P, _P,
                  _P, _P, _P, _P, ctypes.c_int, _P]
    _lib = lib
    return lib


class LayerPlanner:
    """Planning against one `SegmentedNeuronCache` (whose arrays it updates in place) for
    an arena whose scratch slots start at `scratch_base`; output buffers preallocated for
    `d_ffn` neurons."""

    COUNTS = ("lookups", "hot_hits", "lru_hits", "misses", "admitted", "evicted", "bypassed")

    def __init__(self, lib: ctypes.CDLL, cache: SegmentedNeuronCache, cluster_neurons: int,
                 d_ffn: int, scratch_base: int, b1_layers: list[np.ndarray] | None,
                 b1_arena: np.ndarray | None) -> None:
        self.fn = lib.pb_flash_plan
        self.cache, self.cn, self.scratch_base = cache, cluster_neurons, scratch_base
        for name in ("slot_of", "owner", "last_used"):
            arr = getattr(cache, name)
            if not (arr.dtype == np.int64 and arr.flags.c_contiguous):
                raise ValueError(f"cache.{name} must be contiguous int64")
        n_units = cache.units_per_layer
        self.units = np.empty(n_units, dtype=np.int64)
        self.n_units = np.zeros(1, dtype=np.int64)
        self.rows = np.empty(d_ffn, dtype=np.int64)
        self.resident = np.empty(d_ffn, dtype=np.bool_)
        self.miss_units = np.empty(n_units, dtype=np.int64)
        self.miss_slots = np.empty(n_units, dtype=np.int64)
        self.adjacent = False  # the last call's misses hold two clusters adjacent in the file
        self.state = np.zeros(3, dtype=np.int64)  # tick, call start, misses adjacent
        self.counts = np.zeros(len(self.COUNTS), dtype=np.int64)
        self._slot_of = cache.slot_of.ctypes.data
        self._row_bytes = n_units * 8
        self._ptrs = [a.ctypes.data for a in (cache.owner, cache.last_used, self.state)]
        self._out = [a.ctypes.data for a in (self.units, self.n_units, self.rows, self.resident,
                                             self.miss_units, self.miss_slots)]
        self._b1 = [None if b1_layers is None else b.ctypes.data for b in b1_layers] \
            if b1_layers is not None else None
        self._b1_layers = b1_layers  # kept alive
        self._b1_arena = None if b1_arena is None else b1_arena.ctypes.data
        self._counts = self.counts.ctypes.data

    def plan(self, layer: int, ids: np.ndarray, admit: bool = True, count: bool = True
             ) -> tuple[int, int]:
        """ids: int64 ascending distinct (contiguous). Returns (n_miss, n_ids); the results
        are in `rows[:n_ids]`, `resident[:n_ids]`, `units[:n_units[0]]`,
        `miss_units[:n_miss]`, `miss_slots[:n_miss]` (valid until the next call)."""
        c = self.cache
        a, b = c.lru_range[layer]
        self.state[0] = c.tick
        n = int(ids.size)
        n_miss = self.fn(ids.ctypes.data, n, self.cn, self._slot_of + layer * self._row_bytes,
                         *self._ptrs, c.n_hot, a, b, int(admit), self.scratch_base, *self._out,
                         None if self._b1 is None else self._b1[layer], self._b1_arena,
                         int(count), self._counts)
        if n_miss == -2:
            raise ValueError("LayerPlanner.plan: ids must be ascending and distinct")
        c.tick = int(self.state[0])
        c._call_start = int(self.state[1])
        self.adjacent = bool(self.state[2])
        return int(n_miss), n

    def flush_counts(self) -> None:
        """Add the counters gathered since the last flush to the cache's `stats`."""
        if self.counts.any():
            s = self.cache.stats
            for name, v in zip(self.COUNTS, self.counts.tolist(), strict=True):
                setattr(s, name, getattr(s, name) + v)
            self.counts[:] = 0
