"""`ffn_gate_threshold` (CATS): dense gate, |act(gate)| > t per token, sparse up/down,
against a float64 reference with the same mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from powerbench.ops import GatedFFNWeights

from .reference import assert_close

D_MODEL, D_FFN = 48, 160


def reference(x, wg, wu, wd_t, t, kind):
    """float64: the dense gated FFN with the neurons whose |act(gate)| <= t zeroed per token."""
    xd = x.double()
    g = xd @ wg.double().t()
    u = xd @ wu.double().t()
    a = F.silu(g) if kind == "swiglu" else F.relu(g)
    if kind == "drelu":
        u = F.relu(u)
    keep = a.abs() > t
    return (a * u * keep) @ wd_t.double(), keep


def _weights(gen, dtype, kind="swiglu"):
    def w():
        return (torch.randn(D_FFN, D_MODEL, generator=gen) / D_MODEL ** 0.5).to(dtype)

    return GatedFFNWeights(w_gate=w(), w_up=w(), w_down_t=w(), kind=kind)


def _mid_threshold(x, f, kind) -> float:
    """Halfway between two neighbouring |act| values of the first token near its median
    nonzero one (far from every value, so fp32 and fp64 masks agree)."""
    g = x[:1].double() @ f.w_gate.double().t()
    act = (F.silu(g) if kind == "swiglu" else F.relu(g)).abs().flatten()
    values = act[act > 0].sort().values
    k = values.numel() // 2
    return float((values[k - 1] + values[k]) / 2)


@pytest.mark.parametrize("kind", ["swiglu", "reglu", "drelu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3])
def test_matches_float64_reference_with_the_same_mask(ops, gen, kind, dtype, batch):
    f = _weights(gen, dtype, kind)
    x = torch.randn(batch, D_MODEL, generator=gen)
    ref_all, _ = reference(x, f.w_gate, f.w_up, f.w_down_t, 0.0, kind)
    t = _mid_threshold(x, f, kind)
    ref, keep = reference(x, f.w_gate, f.w_up, f.w_down_t, t, kind)
    y, ids = ops.ffn_gate_threshold(x, f, t)
    assert torch.equal(ids, keep.any(0).nonzero().flatten())
    assert 0 < ids.numel() < D_FFN
    assert_close(y, ref, dtype)
    assert (ref - ref_all).abs().max() > 1e-3  # the threshold did change the output


def test_zero_threshold_swiglu_is_the_dense_ffn(ops, gen):
    f = _weights(gen, torch.float32)
    x = torch.randn(2, D_MODEL, generator=gen)
    y, ids = ops.ffn_gate_threshold(x, f, 0.0)
    dense = (F.silu(x.double() @ f.w_gate.double().t()) * (x.double() @ f.w_up.double().t())
             ) @ f.w_down_t.double()
    assert ids.numel() == D_FFN
    assert_close(y, dense, torch.float32)


def test_huge_threshold_drops_everything(ops, gen):
    f = _weights(gen, torch.float32)
    x = torch.randn(1, D_MODEL, generator=gen)
    y, ids = ops.ffn_gate_threshold(x, f, 1e9)
    assert ids.numel() == 0 and torch.count_nonzero(y) == 0 and y.shape == (1, D_MODEL)


def test_backends_agree_and_prepared_call_matches(backends, gen):
    f = _weights(gen, torch.float32)
    x = torch.randn(1, D_MODEL, generator=gen)
    outs = [b.prepare_ffn_gate_threshold(f, 0.05)(x) for b in backends.values()]
    assert torch.equal(outs[0][1], outs[1][1])
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-6)


def test_rejects_relu_weights_and_negative_threshold(ops, gen):
    from powerbench.ops import ReluFFNWeights

    relu = ReluFFNWeights(w1=torch.zeros(4, 2), b1=None, w2_t=torch.zeros(4, 2), b2=None)
    with pytest.raises(TypeError):
        ops.prepare_ffn_gate_threshold(relu, 0.1)
    with pytest.raises(ValueError):
        ops.prepare_ffn_gate_threshold(_weights(gen, torch.float32), -1.0)
