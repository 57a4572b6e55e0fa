"""The hybrid layer's fixed host costs, measured on the GPU machine for the twin of
`bench-hybrid` (`powerbench.measure.hybrid_bench`): the CPU part's round trip through the
engine's own path, the decoder thread's share of it, and one sparse_cuda call's host time.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch


def _host_us(sample: Any, repeats: int) -> float:
    """Median of sample() (host seconds it timed itself), GPU idle before each, in us."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        times.append(sample())
    torch.cuda.synchronize()
    return statistics.median(times[repeats // 10:]) * 1e6


def _wall(fn: Any) -> Any:
    def sample() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    return sample


def host_costs(weights: Any, gpu_backend: str = "sparse_cuda", cpu_backend: str = "sparse_cpu",
               repeats: int = 200, cpu_part: str = "worker") -> dict[str, float]:
    """The hybrid layer's fixed host costs, measured here (GPU idle before each call), for
    the twin (simulator config fields of the same names):

    - hybrid_roundtrip_us: one CPU part's round trip through the engine's own path
      (`CpuPartRunner`, 1 thread) at ONE active neuron: x and the union to pinned memory,
      the worker woken, the copy waited for, the operator run, the slot written, then the
      slot to the GPU without blocking and added there;
    - hybrid_host_us: the decoder thread's own share of it (submit, and merge once the
      worker is done), which it spends in series with its launches;
    - hybrid_host_ops: the aten operators that share issues (counted as `count_ops` counts
      them: the twin's FFN operator count holds them too, and they are charged here);
    - gpu_sparse_call_host_us: the host time of one sparse_cuda FFN call (a device-side
      Threshold, one active neuron, 4096 of layer 0's neurons), launches included.

    `cpu_part`: the engine's CPU-part mode (engine.ffn.cpu_part). Inline, the whole round
    trip runs on the decoder's thread, so hybrid_host_us is the round trip.
    """
    from powerbench.engine.hybrid import gather_part
    from powerbench.engine.hybrid_cpu import CpuPartRunner
    from powerbench.measure.op_counts import OpCounter
    from powerbench.ops import get_backend
    from powerbench.ops.interface import Threshold

    f = weights.layers[0].ffn
    d_ffn, device = f.d_ffn, weights.device
    n = min(4096, d_ffn)
    ids = torch.arange(n)
    host_part = gather_part(f, ids, torch.device("cpu"), weights.dtype, with_bias=False)
    gpu_part = gather_part(f, ids, device, weights.dtype, with_bias=False)
    runner = CpuPartRunner(get_backend(cpu_backend, fallback=False), device, threads=1,
                           inline=cpu_part == "inline")
    gpu_ops = get_backend(gpu_backend, fallback=False)
    x = torch.randn(1, weights.d_model, device=device, dtype=weights.dtype)
    union = torch.zeros(d_ffn, dtype=torch.bool, device=device)
    union[0] = True
    scores = torch.zeros(n, dtype=torch.float32, device=device)
    scores[0] = 1.0
    y = torch.zeros_like(x)
    try:
        with torch.inference_mode():
            trip = _host_us(_wall(lambda: runner.merge(runner.submit(host_part, x, union, False),
                                                       y)), repeats)

            def serial() -> float:
                start = time.perf_counter()
                job = runner.submit(host_part, x, union, False)
                submitted = time.perf_counter()
                job.result()  # the worker's share: not the decoder thread's
                merging = time.perf_counter()
                runner.merge(job, y)
                return submitted - start + time.perf_counter() - merging

            own = trip if runner.inline else _host_us(serial, repeats)
            counter = OpCounter()
            counter.region = "ffn"
            with counter:  # the decoder thread's operators (the mode is per thread)
                runner.merge(runner.submit(host_part, x, union, False), y)
            call = _host_us(_wall(lambda: gpu_ops.ffn(x, gpu_part.weights,
                                                      Threshold(scores, 0.5), check=False)),
                            repeats)
    finally:
        runner.close()
    return {"hybrid_roundtrip_us": trip, "hybrid_host_us": own,
            "hybrid_host_ops": float(counter.counts["ffn"]), "gpu_sparse_call_host_us": call}
