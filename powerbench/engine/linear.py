"""The decoder's dense projections: one `linear(x, w, bias)` callable, chosen once.

Every dense matrix product of the decoder (attention q/k/v/o, the output projection, the
dense FFN) goes through the callable `make_linear` returns, with `F.linear`'s signature:

- `torch`: `F.linear` for every call.
- `sparse_cpu`: calls with at most `max_rows` rows of x (decode: one token per sequence)
  run the C++ dense matrix-vector kernel of the `sparse_cpu` extension
  (`CpuSparseOps.prepare_linear`: the weight rows streamed by its thread pool, fp32
  accumulation; torch's fp16 GEMV reaches about half the memory bandwidth of fp32 on these
  CPUs); more rows (a prompt), non-CPU tensors and non-contiguous weights use `F.linear`. If the extension cannot
  be built here, `F.linear` with one warning.
- `auto` (default): `sparse_cpu` on the CPU when the extension builds, for every weight
  dtype; else `F.linear` (no warning). Until 2026-11-27 fp32 weights took `F.linear`
  (torch's fp32 GEMV then measured as fast: OPT-6.7B fp32 with 2 threads 4.09 vs 3.74
  tok/s, SmolLM2 fp32 with 1 thread equal); the tuned kernel has since passed it. A gated
  FFN of one token through the decoder's dense path (stacked gate/up product, the fused
  activation, the down product), cold calls after a 64 MB cache read, 2-core EPYC host,
  2026-11-27 21:27 UTC: SmolLM2-135M's 576x1536 on one thread 933-945 us with `F.linear`
  (11 GB/s), 401-453 us with our kernel (23-27 GB/s); 4096x16384 on two threads 38.7 ms
  (21 GB/s) vs 22.8 ms (35 GB/s); 4096x11008 25.4 vs 15.2 ms. Whole dense decoders in the
  same rounds (bench-decode task.torch_linear_baseline=true): SmolLM2-135M fp32, one thread,
  18.8 -> 37.5 tok/s; the OPT-6.7B shape fp32, 8 layers, two threads, 2.79 -> 4.76 tok/s.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from powerbench.engine.config import DENSE_KERNELS

LinearFn = Callable[[Tensor, Tensor, Tensor | None], Tensor]
#: rows of x up to which the sparse_cpu kernel is used (a GEMM is faster beyond)
MAX_ROWS = 8


def small_batch_linear(gemv: LinearFn, max_rows: int = MAX_ROWS) -> LinearFn:
    """`gemv` for CPU calls of at most `max_rows` rows of x, `F.linear` for the others."""

    def linear(x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
        if (x.numel() <= max_rows * x.shape[-1] and x.device.type == "cpu"
                and w.is_contiguous()):
            return gemv(x, w, bias)
        return F.linear(x, w, bias)

    linear.gemv = gemv  # type: ignore[attr-defined]
    return linear


def make_linear(kernel: str = "auto", device: torch.device | str = "cpu",
                max_rows: int = MAX_ROWS) -> LinearFn:
    """The decoder's dense projection for weights on `device` (see the module doc)."""
    if kernel not in DENSE_KERNELS:
        raise ValueError(f"unknown dense kernel {kernel!r}; valid: {', '.join(DENSE_KERNELS)}")
    if kernel == "torch" or torch.device(device).type != "cpu" or max_rows < 1:
        return F.linear
    from powerbench.ops import BackendUnavailable, get_backend

    try:
        ops = get_backend("sparse_cpu", fallback=False)
    except BackendUnavailable as err:
        if kernel == "sparse_cpu":
            warnings.warn(f"dense_kernel=sparse_cpu unavailable ({err}); using F.linear",
                          RuntimeWarning, stacklevel=2)
        return F.linear
    return small_batch_linear(ops.prepare_linear(), max_rows)


def kernel_name(linear: LinearFn) -> str:
    """`sparse_cpu` or `torch`: what `make_linear` chose (for result tables)."""
    return "sparse_cpu" if hasattr(linear, "gemv") else "torch"
