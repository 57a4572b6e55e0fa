"""sparse_cuda on a real GPU (skipped without one): float64 references for every op, weight
dtype, id dtype, threshold mode, odd and unaligned sizes and batch (one token, several
8-token tiles, ragged tiles), CUDA-graph replay, and no host synchronisation in the decode
path. Needs torch and pytest only."""

from __future__ import annotations

import pytest
import torch

from powerbench.ops import GATED_KINDS, Threshold, get_backend

from . import reference as ref
from .test_correctness import DTYPES, make_idx, rand

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# (d_ffn, d_model): odd widths take the scalar paths; (1000, 264) and (2000, 256) split the
# axpy neurons over several blocks (workspace + last-block reduction); d_model 4104 needs more
# than one pass of the row kernel's loads, with a ragged last pass.
SHAPES = ((1, 1), (67, 33), (130, 7), (300, 257), (1000, 264), (2000, 256), (600, 4104))
BATCHES = (1, 2, 7, 8, 9, 17)
ACTIVE = ("random", "full", "empty", "random")


@pytest.fixture(scope="module")
def cuda_ops():
    return get_backend("sparse_cuda", fallback=False)


def on(t):
    return None if t is None else t.cuda()


def check_all_ops(ops, w1, wu, w2_t, b1, b2, x, idx, coeffs, dtype):
    """Every op with id list `idx` (CPU tensors in, compared on the CPU in float64)."""
    for scatter in (False, True):
        for check in (True, False):  # the checked path and the direct C++ call
            out = ops.row(on(w1), on(x), on(idx), scatter, bias=on(b1), relu=True, check=check)
            assert out.dtype == x.dtype
            ref.assert_close(out.cpu(), ref.row(w1, x, idx, b1, True, scatter), dtype)
    out = ops.row(on(w1), on(x), on(idx), check=False)
    ref.assert_close(out.cpu(), ref.row(w1, x, idx), dtype)
    for check in (True, False):
        out = ops.axpy(on(w2_t), on(coeffs), on(idx), check=check)
        assert out.dtype == coeffs.dtype and out.shape == (x.shape[0], w2_t.shape[1])
        ref.assert_close(out.cpu(), ref.axpy(w2_t, coeffs, idx), dtype)
        out = ops.ffn_relu(*map(on, (x, w1, b1, w2_t, b2, idx)), check=check)
        assert out.dtype == x.dtype
        ref.assert_close(out.cpu(), ref.ffn_relu(x, w1, b1, w2_t, b2, idx), dtype)
    for kind in GATED_KINDS:
        out = ops.ffn_gated(*map(on, (x, w1, wu, w2_t, idx)), kind, check=False)
        ref.assert_close(out.cpu(), ref.ffn_gated(x, w1, wu, w2_t, idx, kind), dtype)


def check_threshold(ops, w1, wu, w2_t, b1, b2, x, scores, coeffs_full, dtype):
    """Every op with the active set given as scores > 0.3, tested inside the kernels."""
    thr = Threshold(on(scores), 0.3)
    active = (scores > 0.3).nonzero().flatten()
    out = ops.row(on(w1), on(x), thr, bias=on(b1), relu=True, check=False)
    ref.assert_close(out.cpu(), ref.row(w1, x, active, b1, True, scatter=True), dtype)
    out = ops.axpy(on(w2_t), on(coeffs_full), thr, check=False)
    ref.assert_close(out.cpu(), ref.axpy(w2_t, coeffs_full[:, active], active), dtype)
    out = ops.ffn_relu(*map(on, (x, w1, b1, w2_t, b2)), thr, check=False)
    ref.assert_close(out.cpu(), ref.ffn_relu(x, w1, b1, w2_t, b2, active), dtype)
    for kind in GATED_KINDS:
        out = ops.ffn_gated(*map(on, (x, w1, wu, w2_t)), thr, kind, check=False)
        ref.assert_close(out.cpu(), ref.ffn_gated(x, w1, wu, w2_t, active, kind), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_ops_against_float64(cuda_ops, dtype):
    gen = torch.Generator().manual_seed(11)
    case = 0
    for n, d in SHAPES:
        w1, w2_t, wu = (rand(n, d, gen=gen, dtype=dtype, scale=0.2) for _ in range(3))
        b1, b2 = rand(n, gen=gen), rand(d, gen=gen)
        scores = rand(n, gen=gen)
        for batch in BATCHES:
            case += 1
            x = rand(batch, d, gen=gen, dtype=dtype)
            idx_type = torch.int32 if case % 2 else torch.int64
            idx = make_idx(n, ACTIVE[case % len(ACTIVE)], gen, idx_type)
            coeffs = rand(batch, idx.numel(), gen=gen, dtype=dtype)
            if coeffs.numel():
                coeffs[0, 0] = 0.0  # a zero coefficient (the row may be skipped)
            check_all_ops(cuda_ops, w1, wu, w2_t, b1, b2, x, idx, coeffs, dtype)
            check_threshold(cuda_ops, w1, wu, w2_t, b1, b2, x, scores,
                            rand(batch, n, gen=gen, dtype=dtype), dtype)


@pytest.mark.parametrize("one_d", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_out_gets_the_result_and_is_returned(cuda_ops, dtype, one_d):
    """out= on the GPU (sparse_cuda computes, then copies: writes_out is False)."""
    from .test_out import calls

    for name, fn in calls(dtype=dtype, one_d=one_d, device="cuda"):
        want = fn(cuda_ops)
        out = torch.full_like(want, float("nan"))
        assert fn(cuda_ops, out) is out, name
        torch.testing.assert_close(out, want, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unaligned_weights_and_x(cuda_ops, dtype):
    """Tensors one element past a 16-byte boundary take the scalar loads."""
    gen = torch.Generator().manual_seed(3)
    n, d = 200, 264

    def shifted(*shape):
        buf = rand(1 + torch.Size(shape).numel(), gen=gen, dtype=dtype).cuda()
        t = buf[1:].view(*shape)
        assert t.data_ptr() % 16
        return t

    w1, w2_t, wu = shifted(n, d), shifted(n, d), shifted(n, d)
    idx = make_idx(n, "random", gen).cuda()
    for batch in (1, 9):
        x = shifted(batch, d)
        coeffs = shifted(batch, idx.numel())
        cpu = [t.cpu() for t in (w1, w2_t, wu, x, idx, coeffs)]
        ref.assert_close(cuda_ops.row(w1, x, idx, check=False).cpu(),
                         ref.row(cpu[0], cpu[3], cpu[4]), dtype)
        ref.assert_close(cuda_ops.axpy(w2_t, coeffs, idx, check=False).cpu(),
                         ref.axpy(cpu[1], cpu[5], cpu[4]), dtype)
        ref.assert_close(cuda_ops.ffn_gated(x, w1, wu, w2_t, idx, "swiglu", check=False).cpu(),
                         ref.ffn_gated(cpu[3], cpu[0], cpu[2], cpu[1], cpu[4], "swiglu"), dtype)


@pytest.mark.parametrize("x_dtype, w_dtype", [(torch.float32, torch.float16),
                                              (torch.float32, torch.bfloat16),
                                              (torch.float16, torch.bfloat16),
                                              (torch.float64, torch.float16)])
def test_x_dtype_differs_from_weights(cuda_ops, x_dtype, w_dtype):
    gen = torch.Generator().manual_seed(8)
    n, d = 300, 256
    w1, w2_t = rand(n, d, gen=gen, dtype=w_dtype), rand(n, d, gen=gen, dtype=w_dtype)
    b1, b2 = rand(n, gen=gen), rand(d, gen=gen)
    idx = make_idx(n, "random", gen)
    for batch in (1, 8):
        x = rand(batch, d, gen=gen, dtype=x_dtype)
        out = cuda_ops.ffn_relu(*map(on, (x, w1, b1, w2_t, b2, idx)), check=False)
        assert out.dtype == x_dtype
        ref.assert_close(out.cpu(), ref.ffn_relu(x, w1, b1, w2_t, b2, idx), w_dtype)
        out = cuda_ops.row(on(w1), on(x), on(idx), check=False)
        assert out.dtype == x_dtype
        ref.assert_close(out.cpu(), ref.row(w1, x, idx), w_dtype)


def test_graph_replay_matches_eager(cuda_ops):
    """The axpy workspace is zeroed inside the captured work, so every replay is exact."""
    gen = torch.Generator().manual_seed(9)
    n, d = 4096, 1024
    w1, w2_t = on(rand(n, d, gen=gen, dtype=torch.float16, scale=0.1)), \
        on(rand(n, d, gen=gen, dtype=torch.float16, scale=0.1))
    b1, b2 = on(rand(n, gen=gen)), on(rand(d, gen=gen))
    x = on(rand(1, d, gen=gen, dtype=torch.float16))
    idx = on(make_idx(n, "random", gen))
    eager = cuda_ops.ffn_relu(x, w1, b1, w2_t, b2, idx, check=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        cuda_ops.ffn_relu(x, w1, b1, w2_t, b2, idx, check=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = cuda_ops.ffn_relu(x, w1, b1, w2_t, b2, idx, check=False)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        ref.assert_close(out.cpu(), eager.cpu().double(), torch.float16)


def test_bad_ids_raise(cuda_ops):
    w, x = torch.randn(10, 8, device="cuda"), torch.randn(1, 8, device="cuda")
    with pytest.raises(IndexError):
        cuda_ops.row(w, x, torch.tensor([0, 10], device="cuda"))
    with pytest.raises(ValueError):
        cuda_ops.row(w, x, torch.tensor([1, 1], device="cuda"))


def test_direct_path_rejects_bad_arguments(cuda_ops):
    """check=False goes straight to the C++ op; it raises the same error types."""
    w, x = torch.randn(10, 8, device="cuda"), torch.randn(2, 8, device="cuda")
    ids = torch.tensor([1, 2], device="cuda")
    with pytest.raises(TypeError):
        cuda_ops.row(w, x, ids.float(), check=False)
    with pytest.raises(TypeError):
        cuda_ops.row(w.double(), x, ids, check=False)
    with pytest.raises(ValueError):
        cuda_ops.row(w, torch.randn(2, 7, device="cuda"), ids, check=False)
    with pytest.raises(ValueError):
        cuda_ops.axpy(w, torch.randn(2, 3, device="cuda"), ids, check=False)
    with pytest.raises(ValueError):
        cuda_ops.ffn_relu(x, w, torch.randn(9, device="cuda"), w, None, ids, check=False)


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
