"""Weight extraction from HF models into plain per-layer tensors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from powerbench.engine.weights import GatedFFNWeights, ReluFFNWeights, extract_weights
from powerbench.model.spec import FFNKind


def test_opt_layout_shares_storage_and_transposes_fc2(models):
    model = models["opt"]
    w = extract_weights(model)
    blk = model.model.decoder.layers[0]
    f = w.layers[0].ffn
    assert isinstance(f, ReluFFNWeights) and f.kind is FFNKind.relu
    assert f.w1.shape == (256, 64) and f.w2_t.shape == (256, 64) and f.w2.shape == (64, 256)
    assert f.w1.data_ptr() == blk.fc1.weight.data_ptr()  # a view, not a copy
    assert f.w2_t.is_contiguous() and f.w2_t.data_ptr() != blk.fc2.weight.data_ptr()
    assert torch.equal(f.w2_t, blk.fc2.weight.t())
    assert f.b1 is not None and f.b2 is not None
    assert w.lm_head.data_ptr() == w.embed.data_ptr()  # tied
    assert w.pos_offset == 2 and w.pos_embed.shape[0] == 128 + 2
    assert w.pre_norm and w.rope is None and not w.embed.requires_grad


def test_opt_post_ln_with_projections(models):
    w = extract_weights(models["opt_postln_proj"])
    assert not w.pre_norm and w.final_norm is None
    assert w.project_in.shape == (64, 32) and w.project_out.shape == (32, 64)


@pytest.mark.parametrize(("kind", "ffn_kind", "kv"), [("llama_relu_gqa", FFNKind.reglu, 2),
                                                      ("llama_silu", FFNKind.swiglu, 4)])
def test_llama_gated_ffn_gqa_and_rope(models, kind, ffn_kind, kv):
    model = models[kind]
    w = extract_weights(model)
    f = w.layers[1].ffn
    assert isinstance(f, GatedFFNWeights) and f.kind is ffn_kind and w.ffn_kind is ffn_kind
    assert f.w_gate.shape == f.w_up.shape == f.w_down_t.shape == (192, 64)
    assert torch.equal(f.w_down_t, model.model.layers[1].mlp.down_proj.weight.t())
    assert w.n_kv_heads == kv and w.layers[0].attn.wk.shape == (kv * 16, 64)
    assert w.rope is not None and w.rope.inv_freq.shape == (8,)
    assert w.final_norm.kind == "rms" and w.lm_head.data_ptr() != w.embed.data_ptr()


def test_dtype_conversion_copies(models):
    w = extract_weights(models["opt"], dtype=torch.float16)
    assert w.dtype == torch.float16 and w.layers[0].ffn.w2_t.dtype == torch.float16


def test_unsupported_architecture_names_the_supported_ones():
    fake = SimpleNamespace(config=SimpleNamespace(model_type="gpt2"))
    with pytest.raises(ValueError, match="llama.*opt|opt.*llama"):
        extract_weights(fake)
