"""sparse_cuda on a real GPU (skipped without one): float64 references, device-side
threshold, and no host synchronisation in the decode path."""

from __future__ import annotations

import pytest
import torch

from powerbench.ops import GATED_KINDS, Threshold, get_backend

from . import reference as ref
from .test_correctness import CASES, DTYPES, make_idx, rand

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def cuda_ops():
    return get_backend("sparse_cuda", fallback=False)


def on(t):
    return t.cuda()


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_ops_against_float64(cuda_ops, dtype):
    gen = torch.Generator().manual_seed(11)
    for (n, d), batch, active in CASES:
        w1, w2_t, wu = (rand(n, d, gen=gen, dtype=dtype) for _ in range(3))
        b1, b2 = rand(n, gen=gen), rand(d, gen=gen)
        x = rand(batch, d, gen=gen, dtype=dtype)
        idx = make_idx(n, active, gen)
        coeffs = rand(batch, idx.numel(), gen=gen, dtype=dtype)
        for scatter in (False, True):
            out = cuda_ops.row(on(w1), on(x), on(idx), scatter, bias=on(b1), relu=True)
            ref.assert_close(out.cpu(), ref.row(w1, x, idx, b1, True, scatter), dtype)
        ref.assert_close(cuda_ops.axpy(on(w2_t), on(coeffs), on(idx)).cpu(),
                         ref.axpy(w2_t, coeffs, idx), dtype)
        ref.assert_close(cuda_ops.ffn_relu(*map(on, (x, w1, b1, w2_t, b2, idx))).cpu(),
                         ref.ffn_relu(x, w1, b1, w2_t, b2, idx), dtype)
        for kind in GATED_KINDS:
            out = cuda_ops.ffn_gated(*map(on, (x, w1, wu, w2_t, idx)), kind)
            ref.assert_close(out.cpu(), ref.ffn_gated(x, w1, wu, w2_t, idx, kind), dtype)


def test_bad_ids_raise(cuda_ops):
    w, x = torch.randn(10, 8, device="cuda"), torch.randn(1, 8, device="cuda")
    with pytest.raises(IndexError):
        cuda_ops.row(w, x, torch.tensor([0, 10], device="cuda"))
    with pytest.raises(ValueError):
        cuda_ops.row(w, x, torch.tensor([1, 1], device="cuda"))


def test_threshold_and_ids_on_device_without_host_sync(cuda_ops):
    gen = torch.Generator().manual_seed(5)
    n, d = 1000, 256
    w1, w2_t = on(rand(n, d, gen=gen)), on(rand(n, d, gen=gen))
    b1, b2, x = on(rand(n, gen=gen)), on(rand(d, gen=gen)), on(rand(4, d, gen=gen))
    scores = on(rand(n, gen=gen))
    idx = torch.topk(scores, 300).indices  # fixed-size predictor output, stays on device
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        by_threshold = cuda_ops.ffn_relu(x, w1, b1, w2_t, b2, Threshold(scores, 0.3), check=False)
        by_ids = cuda_ops.ffn_relu(x, w1, b1, w2_t, b2, idx, check=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    active = (scores > 0.3).nonzero().flatten()
    ref.assert_close(by_threshold.cpu(), ref.ffn_relu(*(t.cpu() for t in (
        x, w1, b1, w2_t, b2, active))), torch.float32)
    ref.assert_close(by_ids.cpu(), ref.ffn_relu(*(t.cpu() for t in (
        x, w1, b1, w2_t, b2, idx))), torch.float32)
