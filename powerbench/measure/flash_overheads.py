"""Unit costs of the measured flash engine's own layer path on this machine (a
microbenchmark for `powerbench.measure.flash_prediction`), cached next to the `local` profile.

The replay predicts what `engine=flash` reads (bytes, hit rates within 0.2%), but a layer
call also costs the engine's planning (cache lookup, read plans, submitting the reads),
the sparse kernel on cache slots, and reads that share the machine's cores with that
work. This microbenchmark runs the engine itself (`FlashFFN`, the same defaults as
`bench-flash`: bundled 1-neuron clusters, the default I/O engine, O_DIRECT, pipeline) on
the benchmark's own shape and weight file (`layers`, default all 24 OPT-1.3B FFN layers:
a random read's cost depends on the span of the file it lands in, so a small file would
under-charge it) at several DRAM budgets, times every decode layer call and fits

    seconds per layer call = fixed + per_active x computed neurons + per_miss x missed clusters
                             + per_task x reader tasks

with reader tasks = min(task_cap, missed clusters): the thread-pool engine splits a call's
reads over up to `io_threads` pool threads (each woken, scheduled on this machine's few
cores and joined: task_cap = io_threads); native AIO submits them in one batch (one
`io_submit` + one `io_getevents`: task_cap = 1, a per-call cost of calls with reads).
The fit is least squares with non-negative costs (`fit="mean"`, the default): tokens/s is
one over the MEAN step time, and a call's reads wait for the slowest of them, so the tail
of the read latency is a real cost. The earlier least absolute deviations fit
(`fit="median"`, robust to calls preempted by other processes) predicts the median call; in
a run at load 4-6 it fitted only 66-91% of each budget's summed call time, in the quiet
window 91-99%, and its predictions were 5-10% lower than the mean fit's there. On a loaded
machine a preempted call counts in the mean fit too, so measure on a quiet one.
All budgets' engines run side by side, interleaved token by token (as bench-flash does): run
one after another, a slow spell of the machine landed on some budgets only, and repeated
microbenchmarks predicted the same report anywhere from -38% to +21%.
`per_miss` includes the read itself as the engine's
reader achieves it under its own compute, so the storage microbenchmark's bandwidth is
not used on top.

The fit, the load average it ran under, the machine fingerprint and the engine's version
(a hash of the flash engine's source and the microbenchmark's arguments) are cached in
<cache>/hardware/flash_engine.json; `engine_costs()` remeasures when either changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from powerbench.hardware.local import fingerprint
from powerbench.load_window import load_average
from powerbench.measure.flash_ffn_bench import (
    BenchShape,
    synthetic_profile_for,
    synthetic_weights,
)
from powerbench.paths import cache_dir
from powerbench.profiling.active_traces import TraceActiveSets


@dataclass(frozen=True)
class EngineCosts:
    fixed_s: float  # per layer call
    per_active_s: float  # per computed neuron
    per_miss_s: float  # per missed cluster (read + its planning + contention)
    per_task_s: float  # per reader task (min(task_cap, misses) per call with reads)
    io_threads: int
    calls: int
    median_rel_error: float  # |fit - measured| / measured over the calls, median
    loadavg: float  # 1-minute load average at the start
    layers: int
    budgets: tuple[float, ...]
    seconds: float
    measured_at: str = ""
    io_engine: str = "threads"  # the reader engine measured: "threads" or "aio"
    task_cap: int = 0  # reader tasks per call at most: io_threads (threads), 1 (aio)
    fit: str = "median"  # "mean": least squares; "median": least absolute deviations
    budget_fit: tuple[float, ...] = ()  # per budget: fitted / measured summed call time

    def tasks(self, misses: np.ndarray) -> np.ndarray:
        return np.minimum(misses, self.task_cap or self.io_threads)

    def call_seconds(self, active: np.ndarray, misses: np.ndarray) -> np.ndarray:
        return (self.fixed_s + self.per_active_s * active + self.per_miss_s * misses
                + self.per_task_s * self.tasks(misses))


def engine_sources() -> list[Path]:
    """Every source file of the flash engine (its Python, its C++, and the cache policy)."""
    root = Path(__file__).resolve().parent.parent / "flash"
    policy = root.parent / "solver" / "neuron_cache.py"
    return sorted(root.glob("*.py")) + sorted((root / "csrc").glob("*.cpp")) + [policy]


def engine_version(**kwargs: object) -> str:
    """Hash of the flash engine's source files and the microbenchmark's arguments: cached
    unit costs of another engine version (or another measurement) are not reused."""
    h = hashlib.sha256()
    for path in engine_sources():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(json.dumps(kwargs, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _nnls(a: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Weighted least squares with x >= 0 (drop negative ones and refit)."""
    w = np.ones(len(y)) if w is None else w
    keep = np.ones(a.shape[1], dtype=bool)
    while True:
        x = np.zeros(a.shape[1])
        x[keep] = np.linalg.lstsq(a[:, keep] * w[:, None], y * w, rcond=None)[0]
        if (x >= 0).all():
            return x
        keep &= x > 0


def robust_fit(a: np.ndarray, y: np.ndarray, iterations: int = 30) -> np.ndarray:
    """Least absolute deviations (iteratively reweighted), x >= 0: a call preempted by
    another process on a shared machine is an outlier, not a cost of the engine."""
    x = _nnls(a, y)
    for _ in range(iterations):
        r = np.abs(y - a @ x)
        x = _nnls(a, y, 1.0 / np.sqrt(np.maximum(r, 1e-6 * np.median(y))))
    return x


def measure_engine_costs(layers: int = 24, budgets: tuple[float, ...] = (1.0, 0.5, 0.25, 0.1),
                         tokens: int = 48, warmup: int = 8, io_threads: int = 16,
                         seed: int = 1, weights_seed: int = 0, fit: str = "mean",
                         directory: str | os.PathLike | None = None
                         ) -> EngineCosts:
    from powerbench.flash.ffn import FlashFFN

    if fit not in ("mean", "median"):
        raise ValueError(f"fit must be 'mean' or 'median', got {fit!r}")
    t_start = time.perf_counter()
    load = load_average()
    shape = BenchShape(n_layers=layers)
    weights = synthetic_weights(shape, weights_seed)  # bench-flash's: the same file
    profile = synthetic_profile_for(shape, warmup + tokens, seed)
    sets = TraceActiveSets(profile)
    root = str(directory or cache_dir() / "flash")
    dtype = getattr(torch, shape.dtype)
    xs = torch.randn(warmup + tokens, 1, shape.d_model, generator=torch.Generator()
                     .manual_seed(seed)).to(dtype)
    rows: list[tuple[float, float, float, float]] = []  # (active, misses, seconds, budget)
    # all budgets' engines side by side, interleaved token by token (as bench-flash does),
    # so a slow spell of the machine hits every budget alike
    ffns = [FlashFFN(weights, predictors=sets, cache_dir=root, dram_budget_fraction=b,
                     io_threads=io_threads, dense_from_rows=0, profile=profile)
            for b in budgets]
    cluster = ffns[0].geometry.cluster_neurons * ffns[0].geometry.bundle_bytes
    engine = ffns[0].reader.engine
    task_cap = 1 if engine == "aio" else io_threads
    try:
        for ffn in ffns:
            sets.seek(0)
            for t in range(warmup):
                for layer in range(layers):
                    ffn(layer, xs[t])
        for t in range(warmup, warmup + tokens):
            for b, ffn in zip(budgets, ffns, strict=True):
                sets.seek(t)
                for layer in range(layers):
                    before = ffn.reader.stats.bytes_read
                    n = int(sets.sets[layer][t % sets.n_tokens].numel())
                    t0 = time.perf_counter()
                    ffn(layer, xs[t])
                    dt = time.perf_counter() - t0
                    rows.append((n, (ffn.reader.stats.bytes_read - before) / cluster, dt, b))
    finally:
        for ffn in ffns:
            ffn.close()
    data = np.array(rows)
    a = np.column_stack([np.ones(len(data)), data[:, 0], data[:, 1],
                         np.minimum(data[:, 1], task_cap)])
    x = _nnls(a, data[:, 2]) if fit == "mean" else robust_fit(a, data[:, 2])
    rel = np.abs(a @ x - data[:, 2]) / data[:, 2]
    rms = float(np.median(rel))
    # per budget: fitted / measured summed call time (1.0: the fit charges the mean call)
    per_budget = tuple(float((a[data[:, 3] == b] @ x).sum() / data[data[:, 3] == b, 2].sum())
                       for b in budgets)
    return EngineCosts(float(x[0]), float(x[1]), float(x[2]), float(x[3]), io_threads,
                       len(data), rms, load, layers,
                       tuple(budgets), time.perf_counter() - t_start,
                       time.strftime("%Y-%m-%dT%H:%M:%S"), engine, task_cap, fit, per_budget)


def engine_costs(remeasure: bool = False, **kwargs) -> EngineCosts:
    """The cached fit for this machine (<cache>/hardware/flash_engine.json), else measured."""
    path = cache_dir() / "hardware" / "flash_engine.json"
    current = fingerprint()
    version = engine_version(**kwargs)
    if not remeasure and path.exists():
        try:
            record = json.loads(path.read_text())
            if record.get("fingerprint") == current and record.get("engine") == version:
                c = record["costs"]
                return EngineCosts(**{**c, "loadavg": float(c["loadavg"]),
                                      "budgets": tuple(c["budgets"]),
                                      "budget_fit": tuple(c.get("budget_fit", ()))})
        except (OSError, ValueError, KeyError, TypeError):
            pass
    costs = measure_engine_costs(**kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fingerprint": current, "engine": version,
                                "costs": asdict(costs)}, indent=1))
    return costs
