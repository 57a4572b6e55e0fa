"""Short microbenchmarks of the running machine (each well under a second by default).

Every function returns the best of `repeats` timings (the least disturbed by other
processes) converted to a rate or latency in SI units.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from powerbench.threads import torch_threads


def best_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Smallest wall time of `repeats` calls, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def memory_read_bw(mb: int = 256, threads: int = 1, repeats: int = 5) -> float:
    """Bytes/s of streaming reads: a reduction over an `mb` MB float32 buffer."""
    x = torch.ones(int(mb * 1e6) // 4, dtype=torch.float32)
    with torch_threads(threads):
        t = best_time(lambda: torch.sum(x), repeats)
    return x.numel() * 4 / t


def gemv_flops(dim: int = 4096, threads: int = 1, repeats: int = 5) -> float:
    """FLOP/s of an fp32 matrix-vector product (memory-bound: decode's kernel)."""
    a = torch.randn(dim, dim, dtype=torch.float32)
    v = torch.randn(dim, dtype=torch.float32)
    with torch_threads(threads):
        t = best_time(lambda: torch.mv(a, v), repeats)
    return 2.0 * dim * dim / t


def gemm_flops(dim: int = 512, threads: int = 1, repeats: int = 5) -> float:
    """FLOP/s of an fp32 matrix-matrix product (compute-bound)."""
    a = torch.randn(dim, dim, dtype=torch.float32)
    b = torch.randn(dim, dim, dtype=torch.float32)
    with torch_threads(threads):
        t = best_time(lambda: torch.mm(a, b), repeats)
    return 2.0 * dim ** 3 / t


def op_dispatch_latency(iters: int = 2000) -> float:
    """Seconds per tiny torch op on the CPU: the CPU analogue of a kernel launch."""
    a, b = torch.ones(1), torch.ones(1)
    out = torch.empty(1)

    def run() -> None:
        for _ in range(iters):
            torch.add(a, b, out=out)

    return best_time(run, repeats=3) / iters


def thread_sync_latency(iters: int = 2000) -> float:
    """One-way handoff latency between two threads (half a lock ping-pong round trip).

    Measured through Python locks, so it is an upper bound on a native barrier.
    """
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def partner() -> None:
        for _ in range(iters):
            ping.acquire()
            pong.release()

    worker = threading.Thread(target=partner, daemon=True)
    worker.start()
    start = time.perf_counter()
    for _ in range(iters):
        ping.release()
        pong.acquire()
    elapsed = time.perf_counter() - start
    worker.join()
    return elapsed / (2 * iters)


# ---- CUDA ---------------------------------------------------------------------------------
def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def _cuda_time(fn: Callable[[], object], repeats: int) -> float:
    """Best device time (CUDA events) of `fn`, seconds."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(max(repeats, 1)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return max(best, 1e-9)


def cuda_copy_bw(mb: int = 256, repeats: int = 5) -> dict[str, float]:
    """Bytes/s: host->device and device->host (pinned), and device->device (read + write)."""
    n = int(mb * 1e6)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev2 = torch.empty_like(dev)
    h2d = _cuda_time(lambda: dev.copy_(host, non_blocking=True), repeats)
    d2h = _cuda_time(lambda: host.copy_(dev, non_blocking=True), repeats)
    d2d = _cuda_time(lambda: dev2.copy_(dev), repeats)
    return {"h2d": n / h2d, "d2h": n / d2h, "d2d": 2 * n / d2d}


def cuda_gemm_flops(dim: int = 4096, repeats: int = 5) -> float:
    """FLOP/s of an fp16 matrix-matrix product on the GPU (tensor cores; prefill's kernel)."""
    a = torch.randn(dim, dim, device="cuda", dtype=torch.float16)
    b = torch.randn(dim, dim, device="cuda", dtype=torch.float16)
    return 2.0 * dim**3 / _cuda_time(lambda: a @ b, repeats)


def cuda_launch_latency(iters: int = 1000) -> float:
    """Seconds per launch of a tiny kernel (enqueue cost, averaged over a burst)."""
    x = torch.ones(1, device="cuda")
    for _ in range(10):
        x.add_(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        x.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def cuda_sync_latency(iters: int = 200) -> float:
    """Seconds for one CPU<->GPU synchronisation: a tiny kernel, then wait for it
    and read one value back (what a hybrid layer pays to merge partial results)."""
    x = torch.ones(1, device="cuda")
    x.add_(1).item()
    best = float("inf")
    for _ in range(iters):
        start = time.perf_counter()
        x.add_(1).item()
        best = min(best, time.perf_counter() - start)
    return best


def cuda_host_op_costs(d_model: int = 4096, heads: int = 32, context: int = 64,
                       iters: int = 200) -> dict[str, float]:
    """Host seconds to ISSUE one call of each operator class a GPU decoder layer calls
    (median over `iters` single calls, the GPU idle before each, so the queue never makes
    the host wait): a tiny elementwise kernel, a decode GEMV with bias (F.linear, one row,
    d_model x d_model fp16), decode attention (SDPA, one query over `context` keys), an
    event record, a stream's wait on an event, and non-blocking d_model-row copies
    device->pinned host and pinned host->device. A layer whose host synchronises every
    layer pays these in series with nothing to hide them."""
    import statistics

    import torch.nn.functional as F

    dev, f16 = "cuda", torch.float16
    x = torch.randn(1, d_model, device=dev, dtype=f16)
    w = torch.randn(d_model, d_model, device=dev, dtype=f16)
    b = torch.randn(d_model, device=dev, dtype=f16)
    hd = d_model // heads
    q = torch.randn(1, heads, 1, hd, device=dev, dtype=f16)
    kv = torch.randn(1, heads, context, hd, device=dev, dtype=f16)
    host = torch.empty(1, d_model, dtype=f16, pin_memory=True)
    event, side = torch.cuda.Event(), torch.cuda.Stream()
    calls = {
        "tiny_kernel": lambda: x.add_(0),
        "gemv_addmm": lambda: F.linear(x, w, b),
        "sdpa_decode": lambda: F.scaled_dot_product_attention(q, kv, kv),
        "event_record": lambda: event.record(),
        "stream_wait_event": lambda: side.wait_event(event),
        "d2h_pinned_async": lambda: host.copy_(x, non_blocking=True),
        "h2d_pinned_async": lambda: x.copy_(host, non_blocking=True),
    }
    out = {}
    for name, fn in calls.items():
        fn()
        times = []
        for _ in range(iters):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        out[name] = statistics.median(times)
    return out


def cuda_device_names() -> list[str]:
    if not cuda_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def cuda_device_info() -> dict[str, float | str | int]:
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    return {"name": props.name, "total_bytes": int(total), "free_bytes": int(free),
            "sm_count": int(props.multi_processor_count)}
