"""Weight preparation from HF layouts, and the fused FFN against the dense torch layers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from powerbench.ops import GatedFFNWeights, prepare_gated_ffn, prepare_relu_ffn


def test_relu_ffn_matches_dense_hf_layers(ops):
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(24, 96), torch.nn.Linear(96, 24)
    weights = prepare_relu_ffn(fc1.weight, fc1.bias, fc2.weight, fc2.bias)
    assert weights.w2_t.shape == (96, 24) and weights.w2_t.is_contiguous()
    assert torch.equal(weights.w2_t, fc2.weight.detach().t())
    x = torch.randn(5, 24)
    with torch.no_grad():
        dense = fc2(F.relu(fc1(x)))
        # the active set is exactly the neurons that fire for some token: output unchanged
        fired = (fc1(x) > 0).any(0).nonzero().flatten()
    assert 0 < fired.numel() < 96
    torch.testing.assert_close(ops.ffn(x, weights, torch.arange(96)), dense, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ops.ffn(x, weights, fired), dense, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["reglu", "drelu", "swiglu"])
def test_gated_ffn_matches_dense(ops, kind):
    torch.manual_seed(1)
    gate, up, down = torch.randn(64, 16), torch.randn(64, 16), torch.randn(16, 64)
    weights = prepare_gated_ffn(gate, up, down, kind=kind, dtype=torch.float16)
    assert weights.w_down_t.dtype == torch.float16 and weights.w_down_t.shape == (64, 16)
    x = torch.randn(3, 16)
    g, u = x @ weights.w_gate.float().t(), x @ weights.w_up.float().t()
    h = {"reglu": F.relu(g) * u, "drelu": F.relu(g) * F.relu(u), "swiglu": F.silu(g) * u}[kind]
    dense = h @ weights.w_down_t.float()
    torch.testing.assert_close(ops.ffn(x, weights, torch.arange(64)), dense, rtol=2e-3,
                               atol=2e-3 * dense.abs().max().item())


def test_prepare_converts_dtype_and_keeps_biases_fp32():
    w = prepare_relu_ffn(torch.randn(8, 4), torch.randn(8), torch.randn(4, 8), torch.randn(4),
                         dtype=torch.bfloat16)
    assert w.w1.dtype == w.w2_t.dtype == torch.bfloat16
    assert w.b1.dtype == w.b2.dtype == torch.float32
    assert (w.d_ffn, w.d_model) == (8, 4)


def test_prepare_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match="not the transpose"):
        prepare_relu_ffn(torch.randn(8, 4), None, torch.randn(8, 4), None)
    with pytest.raises(ValueError, match="inconsistent gated FFN shapes"):
        prepare_gated_ffn(torch.randn(8, 4), torch.randn(8, 4), torch.randn(8, 4))
    with pytest.raises(ValueError, match="unknown gated kind"):
        GatedFFNWeights(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), kind="gelu")
