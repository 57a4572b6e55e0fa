"""Where an engine=hybrid decode step spends its host time, phase by phase: a development
aid for the GPU machine (`experiments/bench_gpu.py timeline`), not a benchmark page.

`phase_times` times, over whole generations, every call of each phase of `HybridFFN`:

    ffn_call   the layer's FFN call on the decoder thread (everything below it)
    mask       the active set (predictor or replayed masks)
    submit     the CPU part handed over: x and the union copied to pinned memory (to_host)
               and the worker queued
    gpu_part   the GPU part issued (its launches: host time; the GPU runs asynchronously)
    merge      the decoder thread waiting for the worker, then the CPU part's y added
    cpu_part   the worker's whole run: the wait for x, the active ids, the operator, the slot

The phases of the decoder thread add up to ffn_call (to_host is part of submit); with the
worker (engine.ffn.cpu_part=worker) cpu_part runs beside submit's end, gpu_part and merge,
inline it runs inside merge. `cpu_part` against `gpu_part` + `merge` shows whether the two parts
overlap: a gpu_part that lasts as long as cpu_part waited for the worker (for the GIL, say)
rather than ran beside it. The wrapped methods are restored afterwards.

`chrome_trace` writes the torch profiler's trace of one generation (every thread's
operators, and the GPU's kernels and copies) for chrome://tracing or Perfetto.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from powerbench.engine.hybrid import HybridFFN
from powerbench.engine.hybrid_cpu import CpuPartRunner
from powerbench.measure.decode_bench import generate_timed

PHASES = {  # phase -> (class, method)
    "ffn_call": (HybridFFN, "__call__"),
    "mask": (HybridFFN, "_mask"),
    "submit": (CpuPartRunner, "submit"),
    "to_host": (CpuPartRunner, "_to_host"),
    "gpu_part": (HybridFFN, "_gpu_part"),
    "merge": (CpuPartRunner, "merge"),
    "cpu_part": (CpuPartRunner, "_run"),
}


@contextlib.contextmanager
def _timed_phases(log: dict[str, list[float]]) -> Iterator[None]:
    """Every PHASES method wrapped to append its wall seconds to log[phase]."""
    originals = {phase: getattr(cls, name) for phase, (cls, name) in PHASES.items()}

    def timed(phase: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                log[phase].append(time.perf_counter() - start)
        return wrapper

    try:
        for phase, (cls, name) in PHASES.items():
            setattr(cls, name, timed(phase, originals[phase]))
        yield
    finally:
        for phase, (cls, name) in PHASES.items():
            setattr(cls, name, originals[phase])


def phase_times(decoder: Any, ids: torch.Tensor, new_tokens: int, rounds: int = 3,
                warmups: int = 2) -> dict[str, Any]:
    """Median and mean microseconds per call of each phase over `rounds` generations of
    `new_tokens` (after `warmups` untimed ones), and the decode milliseconds per token."""
    if not isinstance(decoder.ffn, HybridFFN):
        raise TypeError("phase_times times engine=hybrid's FFN (a decoder with a HybridFFN)")
    log: dict[str, list[float]] = {phase: [] for phase in PHASES}
    with torch.inference_mode():
        for _ in range(warmups):
            generate_timed(decoder, ids, new_tokens)
        with _timed_phases(log):
            seconds = [generate_timed(decoder, ids, new_tokens) for _ in range(rounds)]
    steps = (new_tokens - 1) * ids.shape[0]
    phases = {phase: {"calls": len(t), "median_us": statistics.median(t) * 1e6,
                      "mean_us": statistics.fmean(t) * 1e6}
              for phase, t in log.items() if t}
    return {"decode_ms_per_token": statistics.median(seconds) / steps * 1e3,
            "phases": phases}


def phase_table(result: dict[str, Any]) -> str:
    lines = [f"decode {result['decode_ms_per_token']:.3f} ms per token",
             f"{'phase':10s} {'calls':>7s} {'median us':>10s} {'mean us':>10s}"]
    for phase, row in result["phases"].items():
        lines.append(f"{phase:10s} {row['calls']:7d} {row['median_us']:10.1f} "
                     f"{row['mean_us']:10.1f}")
    return "\n".join(lines)


def chrome_trace(decoder: Any, ids: torch.Tensor, new_tokens: int, path: Path) -> Path:
    """The torch profiler's trace of one generation (CPU threads, and the GPU when there is
    one), gzip-compressed at `path` (.json.gz)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    path = Path(path)
    raw = path.with_name(path.name + ".raw")  # the profiler's plain JSON, gzipped below
    with torch.inference_mode(), profile(activities=activities) as prof:
        generate_timed(decoder, ids, new_tokens)
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return path
