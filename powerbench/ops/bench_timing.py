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

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

CUDA_FLUSH_MB = 512


@dataclass(frozen=True)
class TimingPolicy:
    warmup: int = 1
    reps: int = 5  # at least this many timed calls
    # ... and keep going until this much time was timed: a CPU cell of the 4096x16384 grid
    # then has 6-88 rounds, not 6-23, and its speedup's spread between runs halves
    # (2026-11-27 15:00-15:10 UTC, 32 batch-1 fp32/fp16 cells, paired medians: 3.2% over 5
    # runs at 0.2 s, 1.5% over 3 runs at 1 s; a run of the 32 cells took 24 s and 60 s)
    min_time_s: float = 1.0
    max_reps: int = 100
    flush_mb: int = 64  # buffer read before each call (CUDA: at least CUDA_FLUSH_MB); 0 disables
    # CUDA: capture each call once into a CUDA graph and time its replays (the kernels run
    # back to back, as in a decode step replayed from a graph; no per-kernel launch gaps)
    cuda_graph: bool = False


@dataclass(frozen=True)
class Call:
    """A timed call with an untimed setup: ``setup()`` runs before the cache flush, then
    ``fn()`` is timed (e.g. switching the CPU kernels to an ISA path or knob setting, so
    several run interleaved in one process without the switch in their time)."""

    fn: Callable[[], object]
    setup: Callable[[], object]

    def __call__(self) -> object:
        self.setup()
        return self.fn()


class Timer:
    """Median wall time of ``fn()`` on one device."""

    def __init__(self, device: str, policy: TimingPolicy) -> None:
        self.device = device
        self.policy = policy
        self._order = random.Random(0)  # the rounds' call orders (reproducible)
        # On a GPU the flush also keeps the device busy while the host enqueues the timed
        # call, so the events time the GPU's work, not the host's launch path (a decode loop
        # whose host runs ahead, or a CUDA graph, hides that path the same way): at least
        # CUDA_FLUSH_MB (~0.2 ms of reads on an H100, ten times its L2).
        mb = max(policy.flush_mb, CUDA_FLUSH_MB) if device == "cuda" and policy.flush_mb else \
            policy.flush_mb
        n = mb * 2**20 // 4
        self._flush = torch.ones(n, device=device) if n else None
        self._flush_host = self._flush.numpy() if n and device == "cpu" else None

    def _flush_cache(self) -> None:
        # a READ on both devices: a written flush would leave the L2 full of dirty lines
        # whose write-back then competes with the timed call's reads; on the CPU a
        # single-threaded one (see the module doc)
        if self._flush_host is not None:
            self._flush_host.sum()  # one thread: no torch worker left spinning
        elif self._flush is not None:
            self._flush.sum()

    def _once(self, fn: Callable[[], object]) -> float:
        if isinstance(fn, Call):
            fn.setup()
            fn = fn.fn
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
        """Per-call seconds of each function, timed interleaved: every function once per
        round, each round in a fresh seeded random order, at least as many rounds as
        functions.

        On a shared machine the load drifts; interleaving makes a sparse call and its dense
        reference see the same conditions, so their ratio is robust even when absolute
        times are not."""
        p = self.policy
        if p.cuda_graph and self.device == "cuda":
            fns = tuple(graphed(fn) for fn in fns)
        for _ in range(p.warmup):
            for fn in fns:
                fn()
        if self.device == "cuda":
            torch.cuda.synchronize()
        times: list[list[float]] = [[] for _ in fns]
        rounds = 0
        while (len(times[0]) < p.reps or rounds < len(fns) or
               (sum(map(sum, times)) < p.min_time_s and len(times[0]) < p.max_reps)):
            # each round in its own (seeded) order, at least as many rounds as functions:
            # a call's time depends on the call before it (2026-11-26 12:33 UTC, fp16 row
            # 4096x16384 90% sparse: 7.5x dense right after the dense kernel, 11-14x after
            # another sparse call), so in a fixed order, or one merely rotated (the same
            # predecessors), the contender placed after the dense kernels lost ~1.5x
            for i in self._order.sample(range(len(fns)), len(fns)):
                times[i].append(self._once(fns[i]))
            rounds += 1
        return times


def round_quartiles(num: Sequence[float], den: Sequence[float]) -> tuple[float, float, float]:
    """Quartiles (p25, median, p75) over the rounds of num[r] / den[r], the two calls of a
    round having run side by side; p25 and p75 are NaN with fewer than two rounds.

    The median of these paired ratios is the speedup, not the ratio of the two medians: the
    host's bandwidth drifts between spells of seconds, and a round's two calls share one, so
    the paired ratio cancels it where the medians' ratio can pair a fast spell's dense time
    with a slow spell's sparse time (2026-11-27 15:00-15:10 UTC, 4096x16384 fp32/fp16 batch
    1, 0-90%, 32 cells, a cell's relative standard deviation between runs, averaged: 5 runs
    at 0.2 s per cell, 3.8% for the medians' ratio and 3.2% for the paired median; 3 runs at
    1 s, 2.0% and 1.5%; bench-decode's speedup, SmolLM2-135M, 4 runs of 15 rounds, 1.3% and
    0.5%)."""
    ratios = [n / d for n, d in zip(num, den, strict=True)]
    if len(ratios) < 2:
        return float("nan"), ratios[0], float("nan")
    q1, q2, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return q1, q2, q3


def graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn`'s kernels captured once into a CUDA graph (after warm-up calls on a side
    stream, as torch requires); returns the graph's replay. Raises with the reason when
    `fn` cannot be captured (e.g. it synchronises with the host)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError as err:
        raise RuntimeError(f"timing.cuda_graph: this call cannot be captured in a CUDA graph "
                           f"({err}); time it without cuda_graph") from err
    return graph.replay


def timing_notes(device: str, policy: TimingPolicy) -> list[str]:
    """What a reader must know about how a GPU call was timed ([] on the CPU)."""
    if device != "cuda":
        return []
    how = ("each call's kernels replayed from a CUDA graph captured once (no launch gaps "
           "between them)" if policy.cuda_graph else
           "each call launched from the host as in an eager decode loop (launch gaps between "
           "its kernels included)")
    return [f"CUDA timing: GPU event time; before every call {CUDA_FLUSH_MB} MB are read "
            f"(evicts the L2 without leaving dirty lines, and keeps the GPU busy while the host "
            f"enqueues the call, so the host's launch path is hidden); {how}."]
