"""Tiny random OPT (ReLU, biases) and LLaMA (ReGLU / SwiGLU, gated) decoders, and a
predictor that returns the exact active set (what the oracle does)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def make_opt_weights(d_model: int = 32, d_ffn: int = 96, layers: int = 2, seed: int = 0):
    from transformers import OPTConfig, OPTForCausalLM

    from powerbench.engine.weights import extract_weights

    torch.manual_seed(seed)
    config = OPTConfig(vocab_size=97, hidden_size=d_model, ffn_dim=d_ffn,
                       num_hidden_layers=layers, num_attention_heads=4,
                       max_position_embeddings=64, word_embed_proj_dim=d_model)
    return extract_weights(OPTForCausalLM(config).eval())


def make_llama_weights(act: str = "relu", seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    from powerbench.engine.weights import extract_weights

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, hidden_act=act,
                      max_position_embeddings=64, initializer_range=0.1,
                      tie_word_embeddings=False)
    return extract_weights(LlamaForCausalLM(cfg).eval())


class TrueMask:
    """The exact active set of each layer (union over the batch); `drop` loses neurons."""

    def __init__(self, weights, drop: int = 0) -> None:
        self.weights, self.drop = weights, drop

    def predict(self, layer_idx, x):
        f = self.weights.layers[layer_idx].ffn
        xf = x.float()
        if hasattr(f, "w1"):
            pre = xf @ f.w1.float().T + (0 if f.b1 is None else f.b1.float())
        else:
            pre = xf @ f.w_gate.float().T
            if f.kind.value == "swiglu":  # silu never zero: take a thresholded set
                pre = pre.abs() - 0.05
        return torch.nonzero((pre > 0).any(0)).flatten()[self.drop:]


@pytest.fixture(scope="session")
def opt_weights():
    return make_opt_weights()


@pytest.fixture(scope="session")
def reglu_weights():
    return make_llama_weights("relu", seed=1)


@pytest.fixture(scope="session")
def swiglu_weights():
    return make_llama_weights("silu", seed=2)
