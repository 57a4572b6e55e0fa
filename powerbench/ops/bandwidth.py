"""Memory bandwidth probes: the yardstick for "achieved GB/s on the touched bytes".

CPU: read bandwidth, a large-buffer reduction with all threads (the C++ read loop when the
extension is available, and ``torch.sum``), best of several runs. CUDA: device-to-device
copy bandwidth (read + write bytes) of a large buffer, timed with CUDA events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Bandwidth:
    gbps: float  # best observed, 1e9 bytes per second
    method: str
    buffer_bytes: int
    repeats: int


def _best_rate(fn: Callable[[], object], nbytes: int, repeats: int) -> float:
    fn()  # warm-up (page faults, thread start)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def cpu_read_bandwidth(size_mb: int = 512, repeats: int = 5) -> Bandwidth:
    """Best read bandwidth over the C++ read loop (if built) and ``torch.sum``."""
    buf = torch.ones(size_mb * 2**20 // 4, dtype=torch.float32)
    nbytes = buf.numel() * 4
    probes: dict[str, Callable[[], object]] = {"torch.sum": lambda: buf.sum()}
    try:
        from powerbench.ops.registry import get_backend

        ops = get_backend("sparse_cpu", fallback=False)
        probes["cpp_read_loop"] = lambda: ops.read_sum(buf)  # type: ignore[attr-defined]
    except Exception:  # extension unavailable: torch.sum alone
        pass
    rates = {name: _best_rate(fn, nbytes, repeats) for name, fn in probes.items()}
    method = max(rates, key=rates.__getitem__)
    return Bandwidth(rates[method], method, nbytes, repeats)


def cuda_copy_bandwidth(size_mb: int = 1024, repeats: int = 10) -> Bandwidth:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    src = torch.ones(size_mb * 2**20 // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return Bandwidth(2 * src.numel() * 4 / best / 1e9, "cuda_copy", src.numel() * 4, repeats)
