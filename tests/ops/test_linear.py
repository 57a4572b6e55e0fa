"""Dense `linear` (the decode matrix-vector kernel): y = x W^T + b against a float64
reference, every weight/input dtype, with and without bias, sizes that are not multiples of
8/16, one and several rows, 1-D and 3-D x; and the decoder's seam choosing it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from powerbench.engine.linear import kernel_name, make_linear, small_batch_linear

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _check(y, x, w, b):
    ref = x.double() @ w.double().t()
    if b is not None:
        ref = ref + b.double()
    assert y.dtype == x.dtype and y.shape == ref.shape
    scale = ref.abs().max().item() + 1e-12
    err = (y.double() - ref).abs().max().item() / scale
    assert err <= TOL[x.dtype] + TOL[w.dtype] * (x.dtype != torch.float32), err


@pytest.mark.parametrize("w_dtype", DTYPES)
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_linear_matches_float64(ops, gen, w_dtype, x_dtype, bias, rows):
    n, k = 37, 45  # neither a multiple of 8 nor of 16; n not of the 4-row group
    w = torch.randn(n, k, generator=gen).to(w_dtype)
    x = torch.randn(rows, k, generator=gen).to(x_dtype)
    b = torch.randn(n, generator=gen).to(w_dtype) if bias else None
    _check(ops.linear(x, w, b), x.to(torch.float32).to(x_dtype), w, b)


@pytest.mark.parametrize("shape", [(1, 2, 70), (70,), (5, 70)])
def test_linear_keeps_leading_dims_and_spans_threads(cpu_ops, isa, gen, shape):
    # 4099 rows x 70: big enough for the thread pool to split the rows between workers
    w = torch.randn(4099, 70, generator=gen, dtype=torch.float16)
    x = torch.randn(*shape, generator=gen)
    y = cpu_ops.linear(x, w)
    assert y.shape == (*shape[:-1], 4099)
    torch.testing.assert_close(y, F.linear(x, w.float()), atol=1e-4, rtol=1e-4)


def test_linear_argument_errors(cpu_ops):
    w = torch.randn(6, 8)
    with pytest.raises(ValueError, match=r"\[\.\.\., 8\]"):
        cpu_ops.linear(torch.randn(2, 7), w)
    with pytest.raises(ValueError):
        cpu_ops.linear(torch.randn(2, 8), w, torch.randn(5))
    with pytest.raises((TypeError, RuntimeError)):
        cpu_ops.prepare_linear()(torch.randn(2, 8), torch.ones(6, 8, dtype=torch.int32), None)


def test_seam_uses_the_kernel_for_few_rows_and_torch_for_many(cpu_ops, gen):
    calls = []

    def gemv(x, w, b):
        calls.append(x.shape)
        return cpu_ops.prepare_linear()(x, w, b)

    linear = small_batch_linear(gemv, max_rows=4)
    w, b = torch.randn(9, 12, generator=gen), torch.randn(9, generator=gen)
    few, many = torch.randn(1, 4, 12, generator=gen), torch.randn(1, 5, 12, generator=gen)
    torch.testing.assert_close(linear(few, w, b), F.linear(few, w, b))
    torch.testing.assert_close(linear(many, w, b), F.linear(many, w, b))
    linear(few, w.t().contiguous().t(), b)  # non-contiguous weight: F.linear
    assert calls == [few.shape]


def test_auto_uses_the_kernel_for_every_weight_dtype(cpu_ops, gen):
    """auto: our kernel for fp32 weights too (it outran torch's fp32 GEMV, 2026-11-27)."""
    linear = make_linear("auto", "cpu")
    assert kernel_name(linear) == "sparse_cpu"
    calls = []

    def gemv(x, w, b):
        calls.append(w.dtype)
        return cpu_ops.prepare_linear()(x, w, b)

    linear = small_batch_linear(gemv, max_rows=8)
    x = torch.randn(1, 12, generator=gen)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        w = torch.randn(9, 12, generator=gen).to(dtype)
        linear(x.to(dtype), w, None)
    assert calls == [torch.float32, torch.float16, torch.bfloat16]


def test_make_linear_choices(cpu_ops):
    assert make_linear("torch") is F.linear
    assert make_linear("auto", "meta") is F.linear  # not a CPU tensor: torch
    assert kernel_name(make_linear("auto", "cpu")) == "sparse_cpu"
    assert kernel_name(make_linear("sparse_cpu", "cpu", max_rows=0)) == "torch"
    with pytest.raises(ValueError, match="valid: auto, torch, sparse_cpu"):
        make_linear("cublas")
