"""The measured profiler on hand-built models whose active neurons are known exactly."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from powerbench.config.schema import ProfilingConfig
from powerbench.model.spec import FFNKind
from powerbench.profiling.activation_profile import coverage_share
from powerbench.profiling.profiler import profile_model
from powerbench.profiling.tokens import profiling_sequences

from .helpers import (
    BOS,
    EOS,
    CharTokenizer,
    all_hooks,
    expected_mask,
    hand_built_opt,
    tiny_llama,
    token_code,
)

TEXTS = ["ab", "cde", "fgahb", "jjj", "dcba"]


def tok(c: str) -> int:
    return ord(c) - ord("a") + 2


def expected_tokens(texts: list[str], seq_len: int) -> list[int]:
    """BOS + (seq_len - 1) stream tokens per sequence, stream = texts joined with EOS."""
    stream = [t for text in texts for t in [*map(tok, text), EOS]]
    out = []
    for i in range(0, len(stream), seq_len - 1):
        out += [BOS, *stream[i:i + seq_len - 1]]
    return out


def test_sequences_are_deterministic_and_bounded():
    t = CharTokenizer()
    assert profiling_sequences(t, ["ab", "cde"], seq_len=4, max_tokens=100) == [
        [BOS, tok("a"), tok("b"), EOS], [BOS, tok("c"), tok("d"), tok("e")], [BOS, EOS]]
    assert profiling_sequences(t, ["ab", "cde"], seq_len=4, max_tokens=6) == [
        [BOS, tok("a"), tok("b"), EOS], [BOS, tok("c")]]
    with pytest.raises(ValueError, match="no tokens"):
        profiling_sequences(t, ["", ""], seq_len=4, max_tokens=10)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_hand_built_opt_counts_exact(batch_size):
    loaded = hand_built_opt()
    cfg = ProfilingConfig(max_tokens=1000, seq_len=5, samples_per_layer=7, trace_tokens=9,
                        batch_size=batch_size)
    profile = profile_model(loaded, TEXTS, cfg, dataset="hand", seed=1, progress=False)
    tokens = expected_tokens(TEXTS, 5)
    assert profile.n_tokens == len(tokens) == 28  # 22 stream tokens + 6 BOS
    assert profile.source == "measured" and profile.n_layers == 2
    for li, layer in enumerate(profile.layers):
        truth = np.stack([expected_mask(t, li) for t in tokens])
        np.testing.assert_array_equal(layer.counts, truth.sum(axis=0))
        assert layer.counts.dtype == np.int64
        np.testing.assert_allclose(layer.token_active, truth.mean(axis=1), atol=1e-6)
        assert layer.sparsity == pytest.approx(1 - truth.mean())
        assert layer.skew() == pytest.approx(coverage_share(truth.sum(axis=0)))
        assert (layer.counts[12:] == 0).all() if li == 0 else (layer.counts[:4] == 0).all()
        # samples: same positions in every layer, masks and hidden match the tokens there
        pos = profile.sample_positions
        assert pos.shape == (7,) and len(set(pos.tolist())) == 7
        np.testing.assert_array_equal(layer.masks, truth[pos])
        assert layer.hidden.dtype == np.float16 and layer.hidden.shape == (7, 8)
        signs = np.array([[1 if b else -1 for b in token_code(tokens[p])] for p in pos])
        np.testing.assert_array_equal(np.sign(layer.hidden), signs)
        # traces: the first 9 consecutive tokens
        np.testing.assert_array_equal(layer.trace_masks(), truth[:9])
    assert all_hooks(loaded.model) == 0


def test_token_budget_and_sample_seed():
    loaded = hand_built_opt()
    cfg = ProfilingConfig(max_tokens=12, seq_len=5, samples_per_layer=4, trace_tokens=100,
                        batch_size=2)
    a = profile_model(loaded, TEXTS, cfg, "hand", seed=0, progress=False)
    b = profile_model(loaded, TEXTS, cfg, "hand", seed=0, progress=False)
    c = profile_model(loaded, TEXTS, cfg, "hand", seed=5, progress=False)
    assert a.n_tokens == 12
    assert a.layers[0].trace_tokens == 12  # capped at the tokens profiled
    np.testing.assert_array_equal(a.sample_positions, b.sample_positions)
    assert not np.array_equal(a.sample_positions, c.sample_positions)
    truth = np.stack([expected_mask(t, 0) for t in expected_tokens(TEXTS, 5)[:12]])
    np.testing.assert_array_equal(a.layers[0].counts, truth.sum(axis=0))


def test_llama_reglu_masks_match_gate_and_all_tokens_recorded():
    loaded = tiny_llama()
    texts = ["abcdefghij" * 5, "jihgfedcba" * 4, "aabbccdd"]
    cfg = ProfilingConfig(max_tokens=80, seq_len=16, samples_per_layer=10_000,
                        trace_tokens=10_000, batch_size=2)
    profile = profile_model(loaded, texts, cfg, "t", progress=False)
    assert profile.meta["active_definition"] == "gate(x) > 0"
    assert profile.n_tokens == 80
    for li, layer in enumerate(profile.layers):
        # every token sampled and traced: all views must agree exactly with the counts
        np.testing.assert_array_equal(profile.sample_positions, np.arange(80))
        np.testing.assert_array_equal(layer.masks.sum(axis=0), layer.counts)
        np.testing.assert_array_equal(layer.trace_masks(), layer.masks)
        np.testing.assert_allclose(layer.token_active, layer.masks.mean(axis=1), atol=1e-6)
        assert 0.2 < layer.active_fraction < 0.8  # random init: about half the gates > 0
        # independent recomputation from the recorded FFN inputs
        mlp = loaded.model.model.layers[li].mlp
        with torch.no_grad():
            gate = mlp.gate_proj(torch.from_numpy(layer.hidden.astype(np.float32)))
        agree = ((gate > 0).numpy() == layer.masks).mean()
        assert agree > 0.99


def test_drelu_needs_gate_and_up():
    loaded = tiny_llama(seed=2)
    cfg = ProfilingConfig(max_tokens=48, seq_len=16, samples_per_layer=48, trace_tokens=0,
                        batch_size=4)
    reglu = profile_model(loaded, ["abcabcabcabcdddd"] * 3, cfg, "t", progress=False)
    drelu_loaded = replace(loaded, spec=replace(loaded.spec, ffn_kind=FFNKind("drelu")))
    drelu = profile_model(drelu_loaded, ["abcabcabcabcdddd"] * 3, cfg, "t", progress=False)
    for li, (r, d) in enumerate(zip(reglu.layers, drelu.layers, strict=True)):
        assert not (d.masks & ~r.masks).any()  # dReLU-active implies gate > 0
        assert d.counts.sum() < r.counts.sum()
        mlp = loaded.model.model.layers[li].mlp
        with torch.no_grad():
            x = torch.from_numpy(d.hidden.astype(np.float32))
            both = ((mlp.gate_proj(x) > 0) & (mlp.up_proj(x) > 0)).numpy()
        assert (both == d.masks).mean() > 0.99
    assert drelu.meta["active_definition"] == "gate(x) > 0 and up(x) > 0"


def test_hooks_removed_when_forward_fails():
    loaded = hand_built_opt()

    def boom(*_):
        raise RuntimeError("boom")

    failing = loaded.model.model.decoder.layers[1].register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        profile_model(loaded, TEXTS, ProfilingConfig(seq_len=5), "hand", progress=False)
    assert all_hooks(loaded.model) == 1  # only the test's own hook
    failing.remove()
    assert loaded.model.training is False


def test_swiglu_is_profiled_dense_with_samples_for_threshold_sparsity():
    """SiLU has no exact zeros: the profile says the FFN is dense and keeps the (hidden,
    mask) samples that predictor=threshold fits its gate thresholds on."""
    loaded = tiny_llama(act="silu")
    assert loaded.spec.ffn_kind is FFNKind("swiglu")
    cfg = ProfilingConfig(max_tokens=48, seq_len=16, samples_per_layer=20, trace_tokens=4)
    profile = profile_model(loaded, TEXTS, cfg, "hand", progress=False)
    assert profile.summary()["ffn_sparsity"] < 0.01
    assert all(layer.hidden is not None and layer.hidden.shape[0] == 20
               for layer in profile.layers)
    assert "no exact zeros" in profile.meta["active_definition"]


def test_rejects_models_it_cannot_profile():
    loaded = hand_built_opt()
    with pytest.raises(ValueError, match="needs weights"):
        profile_model(replace(loaded, model=None), TEXTS, ProfilingConfig(), "x", progress=False)
