"""Every backend against a float64 reference: odd shapes, empty/full/random active sets,
every storage dtype, batch 1 and > 1 (including more tokens than one 8-token tile)."""

from __future__ import annotations

import pytest
import torch

from powerbench.ops import GATED_KINDS, Threshold

from . import reference as ref

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# (d_ffn, d_model), batch, active set: odd sizes hit the tails of every vector loop, batch 13
# spans more than one 8-token tile, (300, 257) is big enough for the multi-threaded path.
CASES = (
    ((1, 1), 1, "full"),
    ((1, 1), 4, "empty"),
    ((67, 33), 1, "random"),
    ((67, 33), 13, "random"),
    ((67, 33), 4, "full"),
    ((67, 33), 1, "empty"),
    ((130, 7), 4, "random"),
    ((130, 7), 1, "full"),
    ((300, 257), 1, "random"),
    ((300, 257), 13, "full"),
    ((300, 257), 4, "empty"),
)


def make_idx(n: int, kind: str, gen: torch.Generator, dtype=torch.int64) -> torch.Tensor:
    perm = torch.randperm(n, generator=gen)  # unsorted on purpose
    if kind == "empty":
        perm = perm[:0]
    elif kind == "random":
        perm = perm[: max(1, int(n * 0.37))]
    return perm.to(dtype)


def rand(*shape, gen, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


@pytest.mark.parametrize("scatter", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_row(ops, dtype, scatter, gen):
    for (n, k), batch, active in CASES:
        w, x = rand(n, k, gen=gen, dtype=dtype), rand(batch, k, gen=gen, dtype=dtype)
        idx = make_idx(n, active, gen, torch.int32)
        out = ops.row(w, x, idx, scatter)
        assert out.dtype == dtype
        ref.assert_close(out, ref.row(w, x, idx, scatter=scatter), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_bias_relu(ops, dtype, gen):
    for (n, k), batch, active in CASES:
        w, x = rand(n, k, gen=gen, dtype=dtype), rand(batch, k, gen=gen, dtype=dtype)
        bias = rand(n, gen=gen)
        idx = make_idx(n, active, gen)
        for scatter in (False, True):
            out = ops.row(w, x, idx, scatter, bias=bias, relu=True)
            ref.assert_close(out, ref.row(w, x, idx, bias, relu=True, scatter=scatter), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_axpy(ops, dtype, gen):
    for (n, d), batch, active in CASES:
        w_t = rand(n, d, gen=gen, dtype=dtype)
        idx = make_idx(n, active, gen)
        coeffs = rand(batch, idx.numel(), gen=gen, dtype=dtype)
        if coeffs.numel():
            coeffs[0, 0] = 0.0  # a zero coefficient (skipped by the compiled kernels)
        out = ops.axpy(w_t, coeffs, idx)
        assert out.shape == (batch, d) and out.dtype == dtype
        ref.assert_close(out, ref.axpy(w_t, coeffs, idx), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ffn_relu(ops, dtype, gen):
    for (n, d), batch, active in CASES:
        w1, w2_t = rand(n, d, gen=gen, dtype=dtype), rand(n, d, gen=gen, dtype=dtype)
        b1, b2 = rand(n, gen=gen), rand(d, gen=gen)
        x = rand(batch, d, gen=gen, dtype=dtype)
        idx = make_idx(n, active, gen)
        out = ops.ffn_relu(x, w1, b1, w2_t, b2, idx)
        assert out.shape == (batch, d) and out.dtype == dtype
        ref.assert_close(out, ref.ffn_relu(x, w1, b1, w2_t, b2, idx), dtype)


@pytest.mark.parametrize("kind", GATED_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ffn_gated(ops, dtype, kind, gen):
    for (n, d), batch, active in CASES:
        wg, wu, wd_t = (rand(n, d, gen=gen, dtype=dtype) for _ in range(3))
        x = rand(batch, d, gen=gen, dtype=dtype)
        idx = make_idx(n, active, gen)
        out = ops.ffn_gated(x, wg, wu, wd_t, idx, kind)
        assert out.shape == (batch, d) and out.dtype == dtype
        ref.assert_close(out, ref.ffn_gated(x, wg, wu, wd_t, idx, kind), dtype)


def test_ffn_relu_without_biases_and_batch_32(ops, gen):
    n, d = 90, 40
    w1, w2_t = rand(n, d, gen=gen), rand(n, d, gen=gen)
    x = rand(32, d, gen=gen)
    idx = make_idx(n, "random", gen)
    out = ops.ffn_relu(x, w1, None, w2_t, None, idx)
    ref.assert_close(out, ref.ffn_relu(x, w1, None, w2_t, None, idx), torch.float32)


def test_one_dimensional_x_gives_one_dimensional_output(ops, gen):
    n, d = 50, 24
    w1, w2_t = rand(n, d, gen=gen), rand(n, d, gen=gen)
    x = rand(d, gen=gen)
    idx = make_idx(n, "random", gen)
    assert ops.row(w1, x, idx).shape == (idx.numel(),)
    assert ops.row(w1, x, idx, True).shape == (n,)
    out = ops.ffn_relu(x, w1, None, w2_t, None, idx)
    assert out.shape == (d,)
    ref.assert_close(out, ref.ffn_relu(x[None], w1, None, w2_t, None, idx)[0], torch.float32)


def test_int32_and_int64_ids_agree(ops, gen):
    n, d = 70, 36
    w1, w2_t = rand(n, d, gen=gen), rand(n, d, gen=gen)
    x = rand(3, d, gen=gen)
    idx = make_idx(n, "random", gen)
    a = ops.ffn_relu(x, w1, None, w2_t, None, idx.to(torch.int32))
    b = ops.ffn_relu(x, w1, None, w2_t, None, idx.to(torch.int64))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_x_dtype_differs_from_weights(ops, gen):
    n, d = 40, 16
    w = rand(n, d, gen=gen, dtype=torch.float16)
    x = rand(2, d, gen=gen, dtype=torch.float32)
    idx = make_idx(n, "random", gen)
    out = ops.row(w, x, idx)
    assert out.dtype == torch.float32
    ref.assert_close(out, ref.row(w, x, idx), torch.float32)


def test_threshold_active_set(ops, gen):
    n, d = 80, 20
    w1, w2_t = rand(n, d, gen=gen), rand(n, d, gen=gen)
    b1, b2 = rand(n, gen=gen), rand(d, gen=gen)
    x = rand(2, d, gen=gen)
    scores = rand(n, gen=gen)
    th = Threshold(scores, 0.25)
    ids = (scores > 0.25).nonzero().flatten()
    assert 0 < ids.numel() < n
    ref.assert_close(ops.row(w1, x, th), ref.row(w1, x, ids, scatter=True), torch.float32)
    full = rand(2, n, gen=gen)
    ref.assert_close(ops.axpy(w2_t, full, th), ref.axpy(w2_t, full[:, ids], ids), torch.float32)
    ref.assert_close(ops.ffn_relu(x, w1, b1, w2_t, b2, th),
                     ref.ffn_relu(x, w1, b1, w2_t, b2, ids), torch.float32)
    ref.assert_close(ops.ffn_gated(x, w1, w2_t, w1, th, "drelu"),
                     ref.ffn_gated(x, w1, w2_t, w1, ids, "drelu"), torch.float32)


def test_inputs_are_not_modified(ops, gen):
    n, d = 64, 48
    tensors = dict(x=rand(1, d, gen=gen), w1=rand(n, d, gen=gen), b1=rand(n, gen=gen),
                   w2_t=rand(n, d, gen=gen), b2=rand(d, gen=gen))
    idx = make_idx(n, "random", gen)
    before = {k: v.clone() for k, v in tensors.items()}
    ops.ffn_relu(idx=idx, **tensors)
    ops.ffn_gated(tensors["x"], tensors["w1"], tensors["w2_t"], tensors["w1"], idx)
    ops.axpy(tensors["w2_t"], tensors["x"][:, : idx.numel()], idx)
    for k, v in tensors.items():
        assert torch.equal(v, before[k]), k


def test_union_active_set_keeps_relu_per_token(ops):
    # neuron 0 fires for token 0 only; it is in the union, so token 1 must get relu(<0) = 0
    w1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    w2_t = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    x = torch.tensor([[2.0, -1.0], [-3.0, 0.5]])
    out = ops.ffn_relu(x, w1, None, w2_t, None, torch.tensor([0, 1]))
    torch.testing.assert_close(out, torch.tensor([[2.0, 4.0], [1.5, 2.0]]))
    only0 = ops.ffn_relu(x, w1, None, w2_t, None, torch.tensor([0]))
    torch.testing.assert_close(only0, torch.tensor([[2.0, 4.0], [0.0, 0.0]]))
