"""A random-init tiny OPT (ReLU FFN), a word-level tokenizer, random texts: no downloads."""

from __future__ import annotations

import torch

WORDS = [f"w{i}" for i in range(60)]


def make_tiny_opt():
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(0)
    config = OPTConfig(vocab_size=64, hidden_size=32, ffn_dim=128, num_hidden_layers=2,
                       num_attention_heads=2, max_position_embeddings=128,
                       word_embed_proj_dim=32, dropout=0.0)
    model = OPTForCausalLM(config).eval()
    with torch.no_grad():  # biases push fc1 towards ~20% active neurons, like trained ReLU
        for layer in model.model.decoder.layers:
            layer.fc1.weight.normal_(0, 0.3)
            layer.fc1.bias.fill_(-0.25)
    return model


def make_word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)} | {"<unk>": 60, "</s>": 61, "<pad>": 62}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")


def random_texts(n_docs: int, length: int, seed: int = 0) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    return [" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (length,), generator=g))
            for _ in range(n_docs)]
