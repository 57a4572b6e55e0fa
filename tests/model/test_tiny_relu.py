"""tiny_relu: a real trained OPT ReLU model, deterministic, cached with corruption checks.

Uses the session fixture `tiny_model` (tests/conftest.py): a test-sized configuration
trained through the same code path as the default model.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from transformers import OPTForCausalLM, PreTrainedTokenizerFast

from powerbench.config import compose_config
from powerbench.dataset.config import DatasetConfig
from powerbench.model import tiny_relu as tr
from powerbench.model.config import TinyTrainConfig
from powerbench.model.spec import FFNKind
from powerbench.model.train import lr_at


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_fixture_is_a_trained_opt_relu_model(tiny_model):
    assert isinstance(tiny_model.model, OPTForCausalLM)
    assert isinstance(tiny_model.tokenizer, PreTrainedTokenizerFast)
    assert tiny_model.model.config.activation_function == "relu"
    spec = tiny_model.spec
    assert spec.ffn_kind is FFNKind("relu")
    assert (spec.n_layers, spec.d_model, spec.d_ffn, spec.vocab_size) == (2, 64, 256, 512)
    assert tiny_model.source == f"trained:{tiny_model.weights_hash}"
    report = tiny_model.train_report
    assert set(tiny_model.report) == {"tiny_train_time_s", "tiny_heldout_perplexity",
                                      "tiny_unigram_perplexity"}
    # clearly a trained model: well below the unigram perplexity of the same tokens
    assert report.heldout_perplexity < 0.9 * report.unigram_perplexity
    assert report.heldout_tokens > 3000 and report.steps == 80


def test_tokenizer_round_trip_and_generate(tiny_model):
    tok = tiny_model.tokenizer
    text = "User: How do I sort a list in Python?\nAssistant: Use sorted()."
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id == tok.eos_token_id == 2  # OPT: </s> starts a text
    assert tok.decode(ids, skip_special_tokens=True) == text
    inputs = tok("User: Hello", return_tensors="pt")
    out = tiny_model.model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 8


@pytest.mark.slow
def test_training_is_deterministic(tiny_model, tiny_model_config):
    cfg = tiny_model_config
    model, tokenizer, report = tr.train_tiny_relu(cfg.tiny, progress=False)
    trained = _state(model)
    cached = _state(tiny_model.model)
    assert trained.keys() == cached.keys()
    assert all(torch.equal(trained[k], cached[k]) for k in trained)
    assert tokenizer.backend_tokenizer.to_str() == tiny_model.tokenizer.backend_tokenizer.to_str()
    assert report.heldout_perplexity == tiny_model.train_report.heldout_perplexity


@pytest.mark.slow
def test_cache_hit_corruption_and_report(tmp_path, monkeypatch, tiny_model_config):
    cfg = tiny_model_config
    cfg.tiny = dataclasses.replace(cfg.tiny, steps=5, max_docs=400, tokenizer_chars=100_000,
                                   train_chars=100_000, eval_tokens=1024)
    assert tr.tiny_relu_report(cfg, cache_dir=tmp_path) is None
    calls = []
    real_train = tr.train_tiny_relu
    monkeypatch.setattr(tr, "train_tiny_relu",
                        lambda *a, **k: calls.append(1) or real_train(*a, **k))

    first = tr.load_tiny_relu(cfg, cache_dir=tmp_path, progress=False)
    assert len(calls) == 1 and first.directory.name == f"tiny_relu-{first.weights_hash}"
    second = tr.load_tiny_relu(cfg, cache_dir=tmp_path, progress=False)
    assert len(calls) == 1  # cache hit
    assert all(torch.equal(a, b) for a, b in zip(_state(first.model).values(),
                                                 _state(second.model).values(), strict=True))
    report = tr.tiny_relu_report(cfg, cache_dir=tmp_path)
    assert report == first.train_report and report.key == first.weights_hash
    listed = json.loads((first.directory / tr.REPORT_FILE).read_text())["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(listed)

    # the loaded model may map the file: keep a private copy before corrupting it
    first_state = {k: v.clone() for k, v in _state(first.model).items()}
    weights = first.directory / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit-pattern deep inside a tensor
    weights.write_bytes(bytes(data))
    assert not tr.is_valid(first.directory)
    assert tr.tiny_relu_report(cfg, cache_dir=tmp_path) is None
    third = tr.load_tiny_relu(cfg, cache_dir=tmp_path, progress=False)
    assert len(calls) == 2  # corrupt -> retrained, to the same weights
    assert all(torch.equal(a, b) for a, b in zip(first_state.values(),
                                                 _state(third.model).values(), strict=True))
    (third.directory / "tokenizer.json").unlink()
    tr.load_tiny_relu(cfg, cache_dir=tmp_path, progress=False)
    assert len(calls) == 3  # a missing file is a miss too


def test_cache_key_tracks_the_config():
    base = TinyTrainConfig()
    assert tr.cache_key(base) == tr.cache_key(TinyTrainConfig())
    assert tr.cache_key(base) != tr.cache_key(dataclasses.replace(base, steps=base.steps + 1))
    assert tr.cache_key(base) != tr.cache_key(dataclasses.replace(base, split_seed=1))


def test_split_matches_the_sharegpt_dataset_defaults():
    """The held-out documents of dataset=sharegpt are never trained on."""
    tiny, data = TinyTrainConfig(), DatasetConfig()
    assert (tiny.heldout_fraction, tiny.split_seed) == (data.heldout_fraction, data.split_seed)
    cfg = compose_config()
    assert cfg.dataset.heldout_fraction == cfg.model.tiny.heldout_fraction
    assert cfg.dataset.split_seed == cfg.model.tiny.split_seed
    assert cfg.model._target_ == "powerbench.model.tiny_relu.load_tiny_relu"


def test_schedule_warms_up_then_decays():
    cfg = TinyTrainConfig(steps=100, warmup_steps=10, lr=1e-3, min_lr_ratio=0.1)
    lrs = [lr_at(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lrs[-1] == pytest.approx(1e-4, rel=0.01)


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="divisible"):
        tr.opt_config(TinyTrainConfig(d_model=100, n_heads=3))
    with pytest.raises(ValueError, match="max_positions"):
        tr.opt_config(TinyTrainConfig(seq_len=512, max_positions=256))
