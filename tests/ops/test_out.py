"""``out=``: every operator writes its result into the caller's tensor and returns it, with
the same values as the allocating call; a tensor of the wrong dtype or shape is refused."""

from __future__ import annotations

import pytest
import torch

from powerbench.ops import Threshold

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def calls(d: int = 24, n: int = 40, batch: int = 2, dtype: torch.dtype = torch.float32,
          one_d: bool = False, device: str = "cpu"):
    """(name, fn(ops, out=None)) for every public operator on odd sizes, tensors on
    `device`."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(n, d, generator=g).to(device, dtype)
    x = torch.randn(batch, d, generator=g).to(device, dtype)
    x = x[0] if one_d else x
    idx = torch.tensor([1, 4, 5, 17, 38, 39, 22], device=device)
    c = torch.randn(*(() if one_d else (batch,)), idx.numel(), generator=g).to(device, dtype)
    b1, b2 = torch.randn(n, generator=g).to(device), torch.randn(d, generator=g).to(device)
    scores = torch.randn(n, generator=g).to(device)
    return [
        ("row", lambda ops, out=None: ops.row(w, x, idx, bias=b1, relu=True, out=out)),
        ("row_scatter", lambda ops, out=None: ops.row(w, x, idx, True, out=out)),
        ("row_threshold", lambda ops, out=None: ops.row(w, x, Threshold(scores), out=out)),
        ("axpy", lambda ops, out=None: ops.axpy(w, c, idx, out=out)),
        ("ffn_relu", lambda ops, out=None: ops.ffn_relu(x, w, b1, w, b2, idx, out=out)),
        ("ffn_gated", lambda ops, out=None: ops.ffn_gated(x, w, w, w, idx, "swiglu", out=out)),
        ("linear", lambda ops, out=None: ops.linear(x, w, b1, out=out)),
    ]


@pytest.mark.parametrize("one_d", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_out_gets_the_result_and_is_returned(ops, dtype, one_d):
    for name, fn in calls(dtype=dtype, one_d=one_d):
        want = fn(ops)
        out = torch.full_like(want, float("nan"))
        got = fn(ops, out)
        assert got is out, name
        torch.testing.assert_close(out, want, rtol=0, atol=0, msg=name)


def test_float64_tokens_into_a_float64_out(backends):
    w, x = torch.randn(30, 12), torch.randn(2, 12, dtype=torch.float64)
    idx = torch.tensor([0, 7, 29])
    for ops in backends.values():
        want = ops.row(w, x, idx)
        out = torch.empty_like(want)
        assert ops.row(w, x, idx, out=out) is out and out.dtype == torch.float64
        torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "checked"])
def test_a_wrong_out_is_refused(backends, direct):
    """Both paths of a public call (sparse_cpu's direct C++ call for an id tensor, the
    Python checks for a Threshold) refuse a wrong out with the same error types."""
    for ops in backends.values():
        for name, fn in calls():
            if direct != (name != "row_threshold"):
                continue
            want = fn(ops)
            with pytest.raises(TypeError, match="out is"):
                fn(ops, torch.empty_like(want, dtype=torch.float16))
            with pytest.raises(ValueError, match="out has shape"):
                fn(ops, torch.empty(*want.shape[:-1], want.shape[-1] + 1))


def test_an_out_that_holds_the_tokens_gets_the_right_result(ops):
    """out=x (the result overwrites the tokens it is computed from): the same values as a
    fresh result on every backend (sparse_cpu computes aside and copies, as the others do)."""
    g = torch.Generator().manual_seed(11)
    d, n = 24, 40
    w, x = torch.randn(n, d, generator=g), torch.randn(2, d, generator=g)
    square = torch.randn(d, d, generator=g)
    idx = torch.tensor([0, 3, 9, 39])
    cases = [("ffn_relu", lambda x, out=None: ops.ffn_relu(x, w, None, w, None, idx, out=out)),
             ("ffn_gated", lambda x, out=None: ops.ffn_gated(x, w, w, w, idx, out=out)),
             ("linear", lambda x, out=None: ops.linear(x, square, out=out))]
    for name, fn in cases:
        want = fn(x.clone())
        xs = x.clone()
        assert fn(xs, xs) is xs, name
        torch.testing.assert_close(xs, want, rtol=0, atol=0, msg=name)
