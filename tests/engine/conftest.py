"""Small random-init HF models (no downloads) and a locally trained tokenizer."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB = 320
CORPUS = [
    "the quick brown fox jumps over the lazy dog while the cat sleeps on the mat",
    "sparse activation makes large language model inference faster on consumer hardware",
    "a neuron that rarely fires can stay on the cpu while hot neurons live on the gpu",
    "prefill processes the whole prompt and decode produces one token at a time",
] * 4


@pytest.fixture(scope="session")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")
    assert len(fast) <= VOCAB
    return fast


def _ids(tokenizer) -> dict:
    return {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id}


def make_opt(tokenizer, *, pre_norm: bool = True, proj_dim: int = 64, d_model: int = 64,
             d_ffn: int = 256, layers: int = 2, heads: int = 4, seed: int = 0):
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(seed)
    cfg = OPTConfig(vocab_size=VOCAB, hidden_size=d_model, ffn_dim=d_ffn,
                    num_hidden_layers=layers, num_attention_heads=heads,
                    max_position_embeddings=128, word_embed_proj_dim=proj_dim,
                    do_layer_norm_before=pre_norm, dropout=0.0, attention_dropout=0.0,
                    init_std=0.1, **_ids(tokenizer))
    return OPTForCausalLM(cfg).eval()


def make_llama(tokenizer, *, act: str = "relu", kv_heads: int = 2, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=192,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=kv_heads,
                      hidden_act=act, max_position_embeddings=128, initializer_range=0.1,
                      tie_word_embeddings=False, **_ids(tokenizer))
    return LlamaForCausalLM(cfg).eval()


MODEL_KINDS = ("opt", "opt_postln_proj", "llama_relu_gqa", "llama_silu")


@pytest.fixture(scope="session")
def models(tokenizer):
    return {
        "opt": make_opt(tokenizer),
        "opt_postln_proj": make_opt(tokenizer, pre_norm=False, proj_dim=32, seed=1),
        "llama_relu_gqa": make_llama(tokenizer, act="relu", kv_heads=2, seed=2),
        "llama_silu": make_llama(tokenizer, act="silu", kv_heads=4, seed=3),
    }


def loaded_model(name: str, model, tokenizer):
    from powerbench.model.loading import LoadedModel, spec_from_hf_config

    return LoadedModel(spec=spec_from_hf_config(name, model.config), model=model,
                       tokenizer=tokenizer, source="test")


def engine_configs(*names: str) -> dict:
    """conf/engine/<name>.yaml composed and typed with only the engine schemas registered
    (engine tests must not depend on other groups' modules)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore

    from powerbench.config import CONF_DIR, typed
    from powerbench.engine.config import SCHEMAS
    from powerbench.flash.config import SCHEMAS as FLASH_SCHEMAS

    cs = ConfigStore.instance()
    for name, node in {**SCHEMAS, **FLASH_SCHEMAS}.items():
        cs.store(group="schema/engine", name=name, node=node)
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return {name: typed(compose(overrides=[f"+engine={name}"]).engine) for name in names}
