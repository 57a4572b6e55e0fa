"""The `local` profile's engine-kernel rates: what our CPU engines' own kernels achieve on
this machine per weight dtype and thread count, at real-size shapes.

The generic microbenchmarks of `powerbench.hardware.microbench` measure other kernels
(a 256 MB fp32 `torch.sum` on every core, a 512^3 fp32 GEMM, a bare `torch.add`): a
1-thread fp16 decoder reads its weights at a fraction of that bandwidth and runs its
prompt far below that GEMM rate. Here, for each (dtype, threads) of the config:

    stream_bw        the decoder's dense projection (`powerbench.engine.linear`) on
                     batch-1 rows, streaming a decoder layer's matrices (Q/K/V stacked,
                     O, FFN up and down: `kernel_stream=layer`) layer after layer over a
                     working set far beyond the last-level cache (one product per matrix,
                     as decode's; `ffn_up`: [ffn, width] matrices only, which torch's fp32
                     GEMV streamed slower than the down matrix's long rows)
    gemm_flops       one layer's products for a prompt of `kernel_prompt_rows` rows
    attention_flops  causal attention over that prompt at `kernel_heads` x `kernel_head_dim`
    op_s             per operator of a decode attention block issued from Python (dispatch,
                     the thread team's wake-up and barrier: measured at this thread count)
    sparse_call_s    the fused sparse FFN operator's fixed cost beyond one operator

(the same microbenchmarks validation's in-run calibration uses, at the profile's fixed
shapes; powerbench.measure.calibration), each the BEST of `kernel_repeats` timings: the
profile is measured once and must describe the machine undisturbed, not the load of that
moment (the in-run calibration takes medians, like the engines, beside them).

A shared VM's memory speed drifts in spells of minutes (the same stream test has read 24
and 17 GB/s ten minutes apart), so one sample describes one spell: every entry is sampled
`kernel_samples` times, in rounds (each entry once) spaced evenly over
`kernel_sample_window_s` seconds, and each rate stored is the MEDIAN of its samples, the
samples kept beside it (`KernelRates.samples`: their spread is what a validation shows
next to its error, to tell drift from a model miss). The cost model picks the entry of
the placed weight dtype and its `cpu_threads` (powerbench.simulator.rates.cpu_rates).

The rates are those of the code measured: the compiled CPU extension (its dense GEMV, the
fused decode and sparse FFN operators), the Python that builds, picks and calls it, these
microbenchmarks, and torch. `kernel_code_version()` hashes them (the files of
`KERNEL_CODE`, read by path, and torch's version); the profile records it, and a cached
profile measured with other code is measured again (powerbench.hardware.local).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from powerbench.cache import stable_hash
from powerbench.hardware.config import LocalHardwareConfig
from powerbench.hardware.hardware_profile import HardwareProfile, KernelRates
from powerbench.hardware.local import load_local as load_measured
from powerbench.measure.calibration import (
    SAMPLED_RATES,
    attention_flops,
    best_time,
    layer_matrix_shapes,
    python_op_seconds,
    shaped_gemm_flops,
    sparse_call_seconds,
    working_set_bandwidth,
)
from powerbench.threads import torch_threads

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# hardware.kernel_stream: the [out, in] matrices the stream test reads, from (width, ffn)
STREAMS = {"layer": layer_matrix_shapes, "ffn_up": lambda width, ffn: [(ffn, width)]}

PACKAGE = Path(__file__).resolve().parents[1]
# what the kernel measurement runs (paths under the package; a folder: its files but the
# CUDA ones): the CPU extension's sources and build flags, the Python that picks its ISA
# path and calls it (the dense projection, the fused decode and sparse FFN operators), and
# the microbenchmarks themselves
KERNEL_CODE = ("ops/csrc", "ops/extension_build.py", "ops/isa.py", "ops/cpu_backend.py",
               "engine/linear.py", "engine/decode_kernels.py", "measure/calibration.py",
               "measure/local_kernels.py")


def kernel_code_files(root: Path = PACKAGE) -> list[Path]:
    """The files of KERNEL_CODE under `root`, in a fixed order."""
    files: list[Path] = []
    for rel in KERNEL_CODE:
        path = root / rel
        if path.is_dir():
            files += sorted(f for f in path.iterdir() if f.is_file() and "cuda" not in f.name)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"kernel code {rel!r} is not under {root}: update "
                                    "powerbench.measure.local_kernels.KERNEL_CODE")
    return files


def kernel_code_version(root: Path = PACKAGE) -> str:
    """A hash of the code the kernel measurement runs: KERNEL_CODE's files (names and
    contents) and torch's version."""
    files = kernel_code_files(root)
    return stable_hash(f"torch {torch.__version__}",
                       *(part for f in files
                         for part in (f.relative_to(root).as_posix(), f.read_bytes())))


def kernel_threads(cfg: LocalHardwareConfig, cpus: int) -> list[int]:
    """Thread counts measured: the config's, else 1 and every usable core."""
    if cfg.kernel_threads:
        return sorted({max(1, int(t)) for t in cfg.kernel_threads})
    return sorted({1, max(cpus, 1)})


def measure_kernel(cfg: LocalHardwareConfig, dtype: str, threads: int) -> KernelRates:
    """One (dtype, threads) entry (see the module docstring)."""
    if dtype not in DTYPES:
        raise ValueError(f"hardware.kernel_dtypes: {dtype!r} is not one of {sorted(DTYPES)}")
    if cfg.kernel_stream not in STREAMS:
        raise ValueError(f"hardware.kernel_stream: {cfg.kernel_stream!r} is not one of "
                         f"{sorted(STREAMS)}")
    tdtype, width, ffn = DTYPES[dtype], cfg.kernel_width, cfg.kernel_ffn
    rows, heads, head_dim = cfg.kernel_prompt_rows, cfg.kernel_heads, cfg.kernel_head_dim
    repeats = max(cfg.kernel_repeats, 1)
    with torch_threads(threads):
        bw = working_set_bandwidth(cfg.kernel_working_set_mb * 1e6, width, tdtype,
                                   threads=threads, repeats=repeats, timer=best_time,
                                   shapes=STREAMS[cfg.kernel_stream](width, ffn))
        op_s = python_op_seconds(timer=best_time)
        gemm = shaped_gemm_flops(rows, width, ffn, tdtype, repeats=repeats, timer=best_time)
        attention = attention_flops(rows, heads, head_dim, tdtype, repeats=repeats,
                                    timer=best_time)
        call_s = max(sparse_call_seconds(width, ffn, iters=500, timer=best_time) - op_s, 0.0)
    return KernelRates(dtype=dtype, threads=threads, stream_bw=bw, gemm_flops=gemm,
                       attention_flops=attention, op_s=op_s, sparse_call_s=call_s,
                       shape={"width": width, "ffn": ffn, "prompt_rows": rows,
                              "heads": heads, "head_dim": head_dim,
                              "working_set_mb": cfg.kernel_working_set_mb})


T = TypeVar("T")


def spaced_samples(measure: Callable[[], T], samples: int, window_s: float,
                   clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> list[T]:
    """`samples` calls of `measure`, the i-th started at i x window_s / (samples - 1)
    seconds after the first (at once where the one before ran past that time)."""
    if samples < 1:
        raise ValueError(f"hardware.kernel_samples: {samples} samples; give 1 or more")
    if window_s < 0:
        raise ValueError(f"hardware.kernel_sample_window_s: {window_s} s; give 0 or more")
    step = window_s / (samples - 1) if samples > 1 else 0.0
    start, out = clock(), []
    for i in range(samples):
        wait = start + i * step - clock()
        if wait > 0:
            sleep(wait)
        out.append(measure())
    return out


def median_kernel(samples: Sequence[KernelRates]) -> KernelRates:
    """One entry from samples of it: each of SAMPLED_RATES the median of its samples, every
    sample kept in `samples` (in the order taken)."""
    values = {f: [float(getattr(k, f)) for k in samples] for f in SAMPLED_RATES}
    return replace(samples[0], samples=values,
                   **{f: float(statistics.median(v)) for f, v in values.items()})


def measure_kernels(cfg: LocalHardwareConfig, cpus: int) -> tuple[KernelRates, ...]:
    """Every (dtype, threads) entry of the config, sampled in rounds over the window (see
    the module docstring)."""
    entries = [(dtype, t) for dtype in cfg.kernel_dtypes for t in kernel_threads(cfg, cpus)]
    if not entries:
        return ()
    rounds = spaced_samples(lambda: [measure_kernel(cfg, d, t) for d, t in entries],
                            cfg.kernel_samples, cfg.kernel_sample_window_s)
    return tuple(median_kernel(list(entry)) for entry in zip(*rounds, strict=True))


def load_local(cfg: LocalHardwareConfig | None = None,
               cache_dir: str | os.PathLike | None = None, **_: Any) -> HardwareProfile:
    """The `_target_` of conf/hardware/local.yaml: the cached `local` profile (under
    `cache_dir`, the run's) with the engine kernels' rates (measured now if the cache lacks
    them, or measured with other kernel code: `kernel_code_version`)."""
    return load_measured(cfg, measure_kernels=measure_kernels, cache_dir=cache_dir,
                         kernel_code=kernel_code_version())
