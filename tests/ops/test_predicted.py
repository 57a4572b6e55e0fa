"""`ffn_predicted`: a layer's predictor and its sparse FFN in one operator call.

The active set must be exactly the neurons whose predictor logit is >= the threshold for
some token (computed here in float64), and the output the FFN over that set."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from powerbench.ops import GatedFFNWeights, PredictorWeights, ReluFFNWeights

from .reference import assert_close, ffn_gated, ffn_relu


def _predictor(d_model, d_ffn, rank, gen, dtype=torch.float32, hidden_relu=True,
               threshold=0.0, biases=True):
    def t(*shape):
        return torch.randn(*shape, generator=gen)

    return PredictorWeights(
        w1=t(rank, d_model).to(dtype), b1=t(rank) if biases else None,
        w2_t=t(rank, d_ffn).to(dtype), b2=t(d_ffn) if biases else None,
        threshold=threshold, hidden_relu=hidden_relu)


def _expected_ids(x, p: PredictorWeights):
    h = x.double() @ p.w1.double().t()
    if p.b1 is not None:
        h = h + p.b1.double()
    if p.hidden_relu:
        h = h.clamp_min(0)
    logits = h @ p.w2_t.double()
    if p.b2 is not None:
        logits = logits + p.b2.double()
    return torch.nonzero((logits >= p.threshold).any(0)).flatten(), logits


def _with_safe_threshold(x, p: PredictorWeights) -> PredictorWeights:
    """p with its threshold in the widest gap between the logits (between their 40th and
    90th percentile), so that fp32/fp16 rounding cannot flip a decision."""
    _, logits = _expected_ids(x, replace(p, threshold=0.0))
    v = logits.flatten().sort().values
    lo, hi = int(0.4 * v.numel()), int(0.9 * v.numel())
    gaps = v[lo + 1:hi] - v[lo:hi - 1]
    i = int(gaps.argmax())
    assert gaps[i] > 1e-3
    return replace(p, threshold=float((v[lo + i] + v[lo + i + 1]) / 2))


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("hidden_relu", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_relu_ffn_predicted_matches_reference(ops, batch, hidden_relu, dtype, gen):
    d_model, d_ffn, rank = 37, 203, 11
    w = ReluFFNWeights(torch.randn(d_ffn, d_model, generator=gen).to(dtype),
                       torch.randn(d_ffn, generator=gen),
                       torch.randn(d_ffn, d_model, generator=gen).to(dtype),
                       torch.randn(d_model, generator=gen))
    x = torch.randn(batch, d_model, generator=gen)
    p = _with_safe_threshold(x, _predictor(d_model, d_ffn, rank, gen, dtype, hidden_relu))
    want_ids, _ = _expected_ids(x, p)
    assert 0 < want_ids.numel() < d_ffn
    y, ids = ops.ffn_predicted(x, w, p)
    assert torch.equal(ids, want_ids)
    assert_close(y, ffn_relu(x, w.w1, w.b1, w.w2_t, w.b2, want_ids), dtype)


@pytest.mark.parametrize("kind", ["reglu", "drelu", "swiglu"])
def test_gated_ffn_predicted_matches_reference(ops, kind, gen):
    d_model, d_ffn = 24, 96
    w = GatedFFNWeights(*(torch.randn(d_ffn, d_model, generator=gen) for _ in range(3)),
                        kind=kind)
    x = torch.randn(3, d_model, generator=gen)
    p = _with_safe_threshold(x, _predictor(d_model, d_ffn, 8, gen, biases=False))
    want_ids, _ = _expected_ids(x, p)
    y, ids = ops.ffn_predicted(x, w, p)
    assert torch.equal(ids, want_ids)
    assert_close(y, ffn_gated(x, w.w_gate, w.w_up, w.w_down_t, want_ids, kind), torch.float32)


def test_nothing_predicted_gives_the_output_bias(ops, gen):
    w = ReluFFNWeights(torch.randn(64, 16, generator=gen), None,
                       torch.randn(64, 16, generator=gen), torch.randn(16, generator=gen))
    p = _predictor(16, 64, 4, gen, threshold=1e9)
    y, ids = ops.ffn_predicted(torch.randn(2, 16, generator=gen), w, p)
    assert ids.numel() == 0
    torch.testing.assert_close(y, w.b2.expand(2, 16))


def test_predictor_for_another_ffn_is_refused(ops, gen):
    w = ReluFFNWeights(torch.randn(64, 16), None, torch.randn(64, 16), None)
    with pytest.raises(ValueError, match="predictor maps 16 -> 32, the FFN is 16 -> 64"):
        ops.prepare_ffn_predicted(w, _predictor(16, 32, 4, gen))


def test_fused_and_two_step_paths_agree_on_a_trained_predictor(ops, gen):
    """The engine's fused call selects what PredictorSet.predict selects."""
    from powerbench.predictor.model import LayerPredictor

    layer = LayerPredictor(32, 128, rank=8).eval()
    with torch.no_grad():
        layer.threshold.fill_(0.05)
    w = ReluFFNWeights(torch.randn(128, 32, generator=gen), torch.randn(128, generator=gen),
                       torch.randn(128, 32, generator=gen), None)
    x = torch.randn(4, 32, generator=gen)
    want = torch.nonzero(layer.predict_mask(x).any(0)).flatten()
    y, ids = ops.ffn_predicted(x, w, layer.fused_weights())
    assert torch.equal(ids, want)
    torch.testing.assert_close(y, ops.ffn(x, w, want), rtol=1e-5, atol=1e-5)
