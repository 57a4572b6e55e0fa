"""engine=sparse_*: the threshold (CATS) FFN equals a float64 dense reference with the same
per-token mask, and our sparse decoder equals the masked transformers evaluation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from powerbench.engine.decoder import Decoder
from powerbench.engine.sparse import SparseFFN
from powerbench.engine.weights import extract_weights
from powerbench.evaluation.masked import ffn_masking
from powerbench.model.loading import spec_from_hf_config
from powerbench.predictor.gate_threshold import collect_ffn_inputs, fit_gate_thresholds, model_gates


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=80, hidden_size=48, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      hidden_act="silu", max_position_embeddings=64, initializer_range=0.1)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def thresholds(model):
    windows = torch.randint(0, 80, (4, 24), generator=torch.Generator().manual_seed(1))
    gates, kind = model_gates(model)
    samples = collect_ffn_inputs(model, windows)
    return fit_gate_thresholds(spec_from_hf_config("m", model.config), gates, samples, 0.5, kind)


def _reference(f, x, t):
    xd = x.double()
    a = F.silu(xd @ f.w_gate.double().T)
    keep = a.abs() > t
    return (a * (xd @ f.w_up.double().T) * keep) @ f.w_down_t.double(), keep


@pytest.mark.parametrize("backend", ["sparse_torch", "sparse_cpu"])
@pytest.mark.parametrize("rows", [1, 5])
def test_threshold_ffn_equals_float64_reference_with_the_same_mask(model, thresholds, backend,
                                                                    rows):
    w = extract_weights(model)
    ffn = SparseFFN(w, backend, thresholds)
    x = torch.randn(rows, 48, generator=torch.Generator().manual_seed(rows))
    for layer in range(2):
        f = w.layers[layer].ffn
        ref, keep = _reference(f, x, thresholds.thresholds[layer])
        assert 0.2 < keep.float().mean() < 0.8
        y = ffn(layer, x)
        assert y.dtype == x.dtype
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
        dense = F.silu(x @ f.w_gate.T) * (x @ f.w_up.T) @ f.w_down_t
        assert (y - dense).abs().max() > 1e-4  # the threshold changes the output
    assert 0.2 < ffn.metrics()["sparse_computed_fraction"] < 1.0


@pytest.mark.parametrize("backend", ["sparse_torch", "sparse_cpu"])
def test_sparse_decoder_equals_masked_hf_evaluation(model, thresholds, backend):
    """What the benchmark times (our sparse decoder) is what the evaluation scores."""
    w = extract_weights(model)
    decoder = Decoder(w, ffn=SparseFFN(w, backend, thresholds, dense_from_rows=0))
    ids = torch.randint(0, 80, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        ours = decoder.forward(ids, decoder.new_cache(1, 12))
        with ffn_masking(model, thresholds):
            ref = model(ids).logits
        dense = model(ids).logits
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    assert (ref - dense).abs().max() > 1e-3
