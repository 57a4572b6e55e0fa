"""float64 references and tolerances for the operator tests."""

from __future__ import annotations

import torch

# (norm-wise relative error, element-wise error relative to max |ref|) per storage dtype;
# the output is rounded to the storage dtype, so bf16 (8-bit mantissa) gets the widest band.
TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
}


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.shape == ref.shape, (out.shape, ref.shape)
    norm_tol, elem_tol = TOL[dtype]
    got = out.double()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    if scale == 0.0:
        assert torch.count_nonzero(got) == 0
        return
    rel = ((got - ref).norm() / ref.norm()).item()
    assert rel <= norm_tol, f"relative error {rel:.2e} > {norm_tol:.0e}"
    worst = (got - ref).abs().max().item()
    assert worst <= elem_tol * scale, f"max error {worst:.2e} > {elem_tol * scale:.2e}"


def row(w, x, idx, bias=None, relu=False, scatter=False):
    ids = idx.long()
    y = x.double() @ w.double()[ids].t()
    if bias is not None:
        y = y + bias.double()[ids]
    if relu:
        y = y.clamp_min(0)
    if not scatter:
        return y
    out = torch.zeros(x.shape[0], w.shape[0], dtype=torch.float64)
    out[:, ids] = y
    return out


def axpy(w_t, coeffs, idx):
    return coeffs.double() @ w_t.double()[idx.long()]


def ffn_relu(x, w1, b1, w2_t, b2, idx):
    h = row(w1, x, idx, b1, relu=True)
    y = h @ w2_t.double()[idx.long()]
    return y if b2 is None else y + b2.double()


def ffn_gated(x, w_gate, w_up, w_down_t, idx, kind):
    g = row(w_gate, x, idx)
    u = row(w_up, x, idx)
    if kind == "reglu":
        h = g.clamp_min(0) * u
    elif kind == "drelu":
        h = g.clamp_min(0) * u.clamp_min(0)
    else:
        h = torch.nn.functional.silu(g) * u
    return h @ w_down_t.double()[idx.long()]
