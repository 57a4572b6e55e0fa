"""Real checkpoints: offline, a hub model fails at once with what to do."""

from __future__ import annotations

import time

import pytest

from powerbench.config import group_config
from powerbench.model.config import ModelConfig
from powerbench.model.loading import ModelUnavailableError, load_hub_model, spec_from_hf_config


def test_offline_hub_model_fails_fast_and_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # empty local cache
    cfg = group_config("model", "opt_125m")
    start = time.perf_counter()
    with pytest.raises(ModelUnavailableError) as err:
        load_hub_model(cfg)
    assert time.perf_counter() - start < 5
    message = str(err.value)
    assert "facebook/opt-125m" in message and "model.hf_id" in message
    assert "tiny_relu" in message


def test_local_directory_checkpoint(tmp_path):
    """A local path loads through the same code as a hub id (no network)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import OPTConfig, OPTForCausalLM, PreTrainedTokenizerFast

    config = OPTConfig(vocab_size=64, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                       num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=32)
    OPTForCausalLM(config).save_pretrained(tmp_path)
    vocab = {chr(97 + i): i for i in range(26)} | {"<unk>": 26, "</s>": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>",
                            unk_token="<unk>").save_pretrained(tmp_path)
    loaded = load_hub_model(ModelConfig(_target_="x", name="local_opt", hf_id=str(tmp_path)))
    assert loaded.has_weights and loaded.source.startswith("local:")
    assert loaded.spec.d_ffn == 64 and loaded.spec.ffn_kind.value == "relu"


def test_spec_from_llama_config_relu_is_reglu():
    from transformers import LlamaConfig

    spec = spec_from_hf_config("x", LlamaConfig(hidden_size=64, intermediate_size=128,
                                                num_hidden_layers=2, num_attention_heads=4,
                                                num_key_value_heads=2, hidden_act="relu"))
    assert spec.ffn_kind.value == "reglu" and spec.n_kv_heads == 2


def test_fingerprint_follows_the_weights_and_prefers_the_loaders_hash():
    import torch

    from powerbench.model.loading import LoadedModel, load_shape_model

    shape = load_shape_model(group_config("model", "opt_13b"))
    assert shape.fingerprint() == "shape:opt_13b"
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    same = LoadedModel(shape.spec, model=net).fingerprint()
    assert same.startswith("sha256:") and LoadedModel(shape.spec, model=net).fingerprint() == same
    with torch.no_grad():
        net.bias[1] += 1.0
    assert LoadedModel(shape.spec, model=net).fingerprint() != same
    assert LoadedModel(shape.spec, model=net, weights_hash="hub:x@1").fingerprint() == "hub:x@1"
