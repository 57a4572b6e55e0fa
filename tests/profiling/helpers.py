"""Tiny hand-built models and a character tokenizer for the profiler tests."""

from __future__ import annotations

import numpy as np

# ---- tiny hand-built models ------------------------------------------------------------------

BOS, EOS = 0, 1
VOCAB = 16
D_MODEL, D_FFN = 8, 16


class CharTokenizer:
    """'a' -> 2, 'b' -> 3, ...; BOS 0, EOS 1 (the only tokenizer API the profiler uses)."""

    bos_token_id = BOS
    eos_token_id = EOS
    name_or_path = "char-test"
    vocab_size = VOCAB

    def __call__(self, texts, add_special_tokens=False):
        assert not add_special_tokens
        return {"input_ids": [[ord(c) - ord("a") + 2 for c in t] for t in texts]}


def token_code(token: int) -> list[int]:
    """The sign pattern (bit d -> +1/-1 in dim d) embedded for `token`; never all equal."""
    code = (token * 37 + 11) % 254 + 1
    return [(code >> d) & 1 for d in range(D_MODEL)]


def expected_mask(token: int, layer: int) -> np.ndarray:
    """Neurons the hand-built OPT fires for `token` (see `hand_built_opt`)."""
    bits = np.array(token_code(token), dtype=bool)
    mask = np.zeros(D_FFN, dtype=bool)
    mask[:8] = bits
    mask[8:12] = ~bits[:4]
    return mask if layer == 0 else mask[::-1].copy()


def hand_built_opt():
    """A 2-layer OPT whose FFN inputs are LayerNorm(embedding) of the current token.

    Attention output, fc2 and position embeddings are zero, so the residual stream is the
    token embedding everywhere. Embedding = +1/-1 by `token_code`, so the final layer norm
    keeps its signs. Layer 0's fc1: neuron d < 8 fires iff bit d is set, neuron 8 + d
    (d < 4) iff bit d is clear, neurons 12..15 never (bias -1). Layer 1: the same neurons
    in reverse order.
    """
    import torch
    from transformers import OPTConfig, OPTForCausalLM

    from powerbench.model.loading import LoadedModel, spec_from_hf_config

    cfg = OPTConfig(vocab_size=VOCAB, hidden_size=D_MODEL, ffn_dim=D_FFN, num_hidden_layers=2,
                    num_attention_heads=2, word_embed_proj_dim=D_MODEL,
                    max_position_embeddings=64, do_layer_norm_before=True, dropout=0.0,
                    pad_token_id=VOCAB - 1, bos_token_id=BOS, eos_token_id=EOS)
    torch.manual_seed(0)
    model = OPTForCausalLM(cfg).eval()
    dec = model.model.decoder
    with torch.no_grad():
        dec.embed_tokens.weight.copy_(torch.tensor(
            [[1.0 if b else -1.0 for b in token_code(t)] for t in range(VOCAB)]))
        dec.embed_positions.weight.zero_()
        w = torch.zeros(D_FFN, D_MODEL)
        b = torch.zeros(D_FFN)
        for d in range(8):
            w[d, d] = 1.0
        for d in range(4):
            w[8 + d, d] = -1.0
        b[12:] = -1.0
        for i, layer in enumerate(dec.layers):
            layer.self_attn.out_proj.weight.zero_()
            layer.self_attn.out_proj.bias.zero_()
            layer.fc2.weight.zero_()
            layer.fc2.bias.zero_()
            layer.final_layer_norm.weight.fill_(1.0)
            layer.final_layer_norm.bias.zero_()
            layer.fc1.weight.copy_(w if i == 0 else w.flip(0))
            layer.fc1.bias.copy_(b if i == 0 else b.flip(0))
    spec = spec_from_hf_config("hand_opt", cfg)
    return LoadedModel(spec=spec, model=model, tokenizer=CharTokenizer(), source="test")


def tiny_llama(seed: int = 0, act: str = "relu"):
    """A random-init 2-layer LLaMA with ReLU gate (ReGLU; act="silu": SwiGLU)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from powerbench.model.loading import LoadedModel, spec_from_hf_config

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      hidden_act=act, max_position_embeddings=64,
                      bos_token_id=BOS, eos_token_id=EOS, pad_token_id=VOCAB - 1)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    spec = spec_from_hf_config("tiny_llama", cfg)
    return LoadedModel(spec=spec, model=model, tokenizer=CharTokenizer(), source="test")


def all_hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
