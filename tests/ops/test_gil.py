"""sparse_cpu's operators release the GIL while they compute. engine=hybrid runs the CPU part
on a worker thread while the decoder thread issues the GPU part from Python: an operator
that kept the GIL would hold the decoder thread for its whole run (seen on an H100 host,
2026-11-27: the GPU part's launches waited behind the CPU part's operator)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch


def _calls(gen: torch.Generator) -> dict:
    """Each Python-level operator the hybrid engine and the decoder call, sized to run for
    tens of milliseconds on one thread."""
    x = torch.randn(384, 1024, generator=gen)
    w1, w2_t, w3 = (torch.randn(4096, 1024, generator=gen) for _ in range(3))
    idx = torch.arange(4096)
    return {
        "ffn_relu": lambda ops: ops.ffn_relu(x, w1, None, w2_t, None, idx, check=False),
        "ffn_gated": lambda ops: ops.ffn_gated(x, w1, w3, w2_t, idx, "swiglu", check=False),
        "linear": lambda ops: ops.linear(x, w1),
    }


def _largest_gap_beside(call) -> tuple[float, float]:
    """Run `call` on a worker thread (one torch thread) while this thread records
    timestamps as fast as it can: (the call's duration, the longest pause between two of
    this thread's timestamps)."""
    window: dict[str, float] = {}

    def work() -> None:
        torch.set_num_threads(1)  # this thread's count: the operator runs on one core
        window["start"] = time.perf_counter()
        call()
        window["end"] = time.perf_counter()

    worker = threading.Thread(target=work)
    stamps = [time.perf_counter()]
    worker.start()
    while worker.is_alive():
        stamps.append(time.perf_counter())
    worker.join()
    stamps.append(time.perf_counter())
    return window["end"] - window["start"], float(np.diff(stamps).max())


@pytest.mark.parametrize("name", ["ffn_relu", "ffn_gated", "linear"])
def test_python_keeps_running_beside_an_operator(cpu_ops, name):
    call = _calls(torch.Generator().manual_seed(0))[name]
    call(cpu_ops)  # warm: the first call may page the weights in
    duration, gap = _largest_gap_beside(lambda: call(cpu_ops))
    assert duration > 0.03, f"{name} ran {duration * 1e3:.1f} ms: too briefly to tell"
    # holding the GIL would stop this thread for the whole call
    assert gap < duration / 2, (f"{name}: this thread stood still {gap * 1e3:.1f} ms of the "
                                f"operator's {duration * 1e3:.1f} ms (the GIL was held)")
