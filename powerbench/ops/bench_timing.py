"""Timing for the operator benchmark: median of repeated calls after warm-up, with the
last-level cache flushed before every timed call (each decode step meets cold weights, as
a model is far larger than the cache; without the flush a 1%-active layer would be served
from a warm L3 and look faster than memory allows).

On the CPU the flush is a single-threaded read (numpy's sum of the buffer's memory), not
``torch.sum``: torch's OpenMP workers keep spinning for a while after a parallel region, and
a spinning worker takes a core from the call being timed (measured on the 2-core AVX-512
host, 2026-11-25 22:09 UTC, 256 MB fp32 GEMV with our dense kernel: 30 GB/s after a
``torch.sum`` flush, 47-56 GB/s after this one, and the sparse/dense ratios scattered by
+-25% with the torch flush)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TimingPolicy:
    warmup: int = 1
    reps: int = 5  # at least this many timed calls
    min_time_s: float = 0.2  # ... and keep going until this much time was timed
    max_reps: int = 100
    flush_mb: int = 64  # buffer read (CPU) / written (CUDA) before each call; 0 disables


class Timer:
    """Median wall time of ``fn()`` on one device."""

    def __init__(self, device: str, policy: TimingPolicy) -> None:
        self.device = device
        self.policy = policy
        n = policy.flush_mb * 2**20 // 4
        self._flush = torch.ones(n, device=device) if n else None
        self._flush_host = self._flush.numpy() if n and device == "cpu" else None

    def _flush_cache(self) -> None:
        if self._flush is None:
            return
        if self._flush_host is not None:
            self._flush_host.sum()  # one thread: no torch worker left spinning
        else:
            self._flush.zero_()

    def _once(self, fn: Callable[[], object]) -> float:
        self._flush_cache()
        if self.device == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def median(self, fn: Callable[[], object]) -> float:
        """Median seconds per call."""
        return statistics.median(self.samples(fn)[0])

    def samples(self, *fns: Callable[[], object]) -> list[list[float]]:
        """Per-call seconds of each function, timed interleaved (f0, f1, f0, f1, ...).

        On a shared machine the load drifts; interleaving makes a sparse call and its dense
        reference see the same conditions, so their ratio is robust even when absolute
        times are not."""
        p = self.policy
        for _ in range(p.warmup):
            for fn in fns:
                fn()
        if self.device == "cuda":
            torch.cuda.synchronize()
        times: list[list[float]] = [[] for _ in fns]
        while len(times[0]) < p.reps or (
            sum(map(sum, times)) < p.min_time_s and len(times[0]) < p.max_reps
        ):
            for fn, out in zip(fns, times, strict=True):
                out.append(self._once(fn))
        return times
