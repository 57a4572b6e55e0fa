"""Masked dense forward = sparse accuracy: oracle is exact, nothing-predicted is fc2's bias,
trained predictors give dense vs sparse perplexity and MC accuracy; adaptive sizing runs
its perplexity loop on a real (tiny) model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from toy_lm import random_texts

from powerbench.evaluation import (
    MaskedPerplexity,
    continuation_task,
    evaluate_accuracy,
    masked_logits_fn,
    token_windows,
)
from powerbench.model.loading import LoadedModel, spec_from_hf_config
from powerbench.predictor import ModelShape, OraclePredictorSet
from powerbench.predictor.config import AdaptiveConfig, TrainConfig
from powerbench.predictor.hf_ffn import ffn_modules
from powerbench.predictor.predictor_set import PredictorBase
from powerbench.predictor.strategies import AdaptiveSizing
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile


class _Nothing(PredictorBase):
    strategy = "nothing"

    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape

    def _mask(self, layer_idx, x):
        return torch.zeros(x.shape[0], self.shape.neurons, dtype=torch.bool)


def _loaded(model) -> LoadedModel:
    return LoadedModel(spec=spec_from_hf_config("tiny_opt", model.config), model=model,
                       source="test", weights_hash="tiny-opt-test")


def _windows(tok, n_docs=24, seed=0):
    return token_windows(tok, random_texts(n_docs, 60, seed), seq_len=32, max_tokens=10_000)


def test_oracle_masking_reproduces_dense_logits(tiny_opt, word_tokenizer):
    ids = _windows(word_tokenizer)[:4]
    oracle = OraclePredictorSet.from_hf(tiny_opt, _loaded(tiny_opt).spec)
    fn = masked_logits_fn(tiny_opt, oracle)
    assert torch.allclose(fn(ids), tiny_opt(input_ids=ids).logits, atol=1e-5)
    counts = fn.counts
    assert counts.recall == 1.0 and counts.precision == 1.0
    assert 0.05 < counts.true_active_fraction < 0.6  # the FFNs are really sparse
    assert not any(h._forward_pre_hooks for h in (f.output for f in ffn_modules(tiny_opt)))


def test_predicting_nothing_leaves_only_fc2_bias(tiny_opt, word_tokenizer):
    ids = _windows(word_tokenizer)[:2]
    spec = _loaded(tiny_opt).spec
    masked = masked_logits_fn(tiny_opt, _Nothing(ModelShape.of(spec)))(ids)
    reference = copy.deepcopy(tiny_opt)
    with torch.no_grad():
        for layer in reference.model.decoder.layers:
            layer.fc2.weight.zero_()
    assert torch.allclose(masked, reference(input_ids=ids).logits, atol=1e-5)
    assert not torch.allclose(masked, tiny_opt(input_ids=ids).logits, atol=1e-3)


def test_oracle_accuracy_equals_dense(tiny_opt, word_tokenizer):
    texts = random_texts(20, 60, seed=3)
    items = continuation_task(word_tokenizer, texts, n_items=20, context_tokens=12,
                              continuation_tokens=2)
    oracle = OraclePredictorSet.from_hf(tiny_opt, _loaded(tiny_opt).spec)
    report = evaluate_accuracy(tiny_opt, oracle, _windows(word_tokenizer)[:6], items)
    assert report.perplexity == pytest.approx(report.perplexity_dense, rel=1e-5)
    assert report.mc_accuracy == report.mc_accuracy_dense
    metrics = report.metrics()
    for name in ("perplexity", "perplexity_dense", "perplexity_delta_pct", "mc_accuracy",
                 "mc_accuracy_dense"):
        assert name in metrics
    assert abs(metrics["perplexity_delta_pct"]) < 1e-3


def _profile(model, windows) -> ActivationProfile:
    """Minimal measured profile: (fc1 input, fc2 input != 0) for every token."""
    layers = ffn_modules(model)
    xs: list[list] = [[] for _ in layers]
    hs: list[list] = [[] for _ in layers]
    handles = []
    for i, f in enumerate(layers):
        handles.append(f.input.register_forward_pre_hook(
            lambda m, a, i=i: xs[i].append(a[0].reshape(-1, a[0].shape[-1]))))
        handles.append(f.output.register_forward_pre_hook(
            lambda m, a, i=i: hs[i].append(a[0].reshape(-1, a[0].shape[-1]) != 0)))
    with torch.no_grad():
        model(input_ids=windows)
    for h in handles:
        h.remove()
    out = []
    for i in range(len(layers)):
        x, m = torch.cat(xs[i]).numpy(), torch.cat(hs[i]).numpy()
        out.append(LayerProfile(index=i, counts=m.sum(0).astype(np.int64), n_tokens=len(m),
                                token_active=m.mean(1).astype(np.float32),
                                hidden=x.astype(np.float16), masks=m))
    return ActivationProfile(model="tiny_opt", source="measured", dataset="random",
                             n_tokens=len(m), layers=out)


def test_adaptive_on_tiny_model_with_masked_perplexity_loop(tiny_opt, word_tokenizer):
    loaded = _loaded(tiny_opt)
    profile = _profile(tiny_opt, _windows(word_tokenizer, 80, seed=1))
    evaluator = MaskedPerplexity(tiny_opt, _windows(word_tokenizer, 12, seed=2))
    cfg = AdaptiveConfig(target_recall=0.9, ppl_tolerance_pct=0.5, max_ppl_rounds=3,
                         min_rank=8, rank_per_active=0.5,
                         train=TrainConfig(max_epochs=15, patience=3))
    pset = AdaptiveSizing(cfg).build(loaded, profile, evaluator)
    history = pset.info["history"]
    assert pset.info["perplexity_dense"] == pytest.approx(evaluator(None))
    deltas = [h["perplexity_delta_pct"] for h in history]
    assert deltas[0] != 0.0  # the callback really ran the masked model
    if pset.info["converged"]:
        assert deltas[-1] <= cfg.ppl_tolerance_pct
    else:
        assert len(history) == cfg.max_ppl_rounds + 1
    assert [h["target_recall"] for h in history] == sorted(h["target_recall"] for h in history)
    # sparse evaluation of the result: recall on fresh text is high, fewer neurons computed
    report = evaluate_accuracy(tiny_opt, pset, _windows(word_tokenizer, 8, seed=4))
    assert report.eval_recall > 0.85
    assert report.eval_predicted_active_fraction < 0.9
    assert report.perplexity != report.perplexity_dense
