"""Dense matrix-vector product on this CPU: torch ``F.linear`` vs the ``sparse_cpu`` dense
kernel (``CpuSparseOps.linear``), with the DRAM read bandwidth measured in the same run.

    python experiments/gemv_bench.py [--threads 1 2] [--rows 1] [--reps 15]

For each shape and dtype both kernels run alternately (``reps`` times each, medians), so
load drift on a shared machine hits both alike; GB/s counts the weight bytes read once per
call. Prints one line per (threads, shape, dtype).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from powerbench.ops import get_backend
from powerbench.threads import torch_threads

SHAPES = {
    "opt-6.7b qkvo 4096x4096": (4096, 4096),
    "opt-6.7b fc1 16384x4096": (16384, 4096),
    "opt-6.7b lm_head 50272x4096": (50272, 4096),
    "smollm2 q/o 576x576": (576, 576),
    "smollm2 gate/up 1536x576": (1536, 576),
    "smollm2 down 576x1536": (576, 1536),
    "smollm2 lm_head 49152x576": (49152, 576),
}


def timed(fn, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--dtypes", nargs="+", default=["fp32", "fp16"])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    args = parser.parse_args()
    ops = get_backend("sparse_cpu", fallback=False)
    gemv = ops.prepare_linear()
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    print(f"load average {os.getloadavg()}, rows {args.rows}")
    with torch.inference_mode():
        buf = torch.ones(1 << 28)  # 1 GiB: DRAM read bandwidth probe
        for threads in args.threads:
            with torch_threads(threads):
                ops.read_sum(buf)
                bw = buf.numel() * 4 / min(timed(lambda: ops.read_sum(buf), 1)
                                           for _ in range(5)) / 1e9
                print(f"threads {threads}: DRAM read {bw:.1f} GB/s")
                for shape in args.shapes:
                    n, k = SHAPES[shape]
                    for name in args.dtypes:
                        dt = dtypes[name]
                        # several copies so that small matrices come from DRAM, not cache
                        copies = max(1, int(256e6 // (n * k * dt.itemsize)))
                        ws = [torch.randn(n, k).to(dt) for _ in range(copies)]
                        x = torch.randn(args.rows, k).to(dt)
                        it = {"i": 0}

                        def call(f, ws=ws, x=x, it=it):
                            it["i"] = (it["i"] + 1) % len(ws)
                            return f(x, ws[it["i"]], None)

                        inner = max(1, int(50e6 // (n * k * dt.itemsize)))
                        t_torch, t_ours = [], []
                        for _ in range(args.reps):
                            t_torch.append(timed(lambda: call(F.linear), inner))
                            t_ours.append(timed(lambda: call(gemv), inner))
                        nbytes = n * k * dt.itemsize
                        a, b = statistics.median(t_torch), statistics.median(t_ours)
                        print(f"  {shape:<28} {name}: torch {a * 1e6:8.1f} us "
                              f"{nbytes / a / 1e9:5.1f} GB/s ({nbytes / a / 1e9 / bw:4.0%}) | "
                              f"ours {b * 1e6:8.1f} us {nbytes / b / 1e9:5.1f} GB/s "
                              f"({nbytes / b / 1e9 / bw:4.0%}) | {a / b:4.2f}x")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
