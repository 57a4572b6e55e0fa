"""engine=hybrid: the GPU/CPU split and merge (on the CPU with sparse_torch standing in for
both devices), the clear failure without CUDA, and the real thing on a GPU (marker gpu)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powerbench.engine.ffn import DenseFFN
from powerbench.engine.hybrid import HybridEngine, HybridFFN
from powerbench.engine.weights import extract_weights

from .factories import llama_model as _llama
from .factories import make_placement, make_spec
from .factories import opt_model as _opt


def _placement(weights, share=0.4, seed=0):
    d_ffn = weights.layers[0].ffn.d_ffn
    spec = make_spec(n_layers=weights.n_layers, d_model=weights.d_model, d_ffn=d_ffn)
    rng = np.random.default_rng(seed)
    ids = [np.sort(rng.choice(d_ffn, int(share * d_ffn), replace=False))
           for _ in range(weights.n_layers)]
    return make_placement(spec, ids)


@pytest.mark.parametrize("make", [_opt, _llama], ids=["opt_relu", "llama_reglu"])
@pytest.mark.parametrize("active", ["oracle", "dense"])
def test_split_and_merge_equal_the_dense_ffn(make, active):
    weights = extract_weights(make())
    placement = _placement(weights)
    hybrid = HybridFFN(weights, placement=placement, active=active,
                       gpu_backend="sparse_torch", cpu_backend="sparse_torch")
    dense = DenseFFN(weights)
    x = torch.randn(3, weights.d_model)
    for layer in range(weights.n_layers):
        torch.testing.assert_close(hybrid(layer, x), dense(layer, x), rtol=1e-5, atol=1e-5)
    metrics = hybrid.metrics()
    share = metrics["hybrid_gpu_neuron_load_share"]
    assert 0.0 < share < 1.0
    if active == "dense":
        assert share == pytest.approx(0.4, abs=0.01)


def test_load_split_counts_the_union_on_each_side():
    weights = extract_weights(_opt())
    placement = _placement(weights, share=0.5, seed=3)
    hybrid = HybridFFN(weights, placement=placement, active="oracle",
                       gpu_backend="sparse_torch", cpu_backend="sparse_torch")
    x = torch.randn(4, weights.d_model)
    hybrid(0, x)
    f = weights.layers[0].ffn
    union = (torch.nn.functional.linear(x, f.w1, f.b1) > 0).any(0).numpy()
    on_gpu = placement.gpu_mask(0)
    m = hybrid.metrics()
    assert m["hybrid_gpu_neurons_per_call"] == union[on_gpu].sum()
    assert m["hybrid_cpu_neurons_per_call"] == union[~on_gpu].sum()


def test_all_neurons_on_one_side_keeps_the_output_bias():
    weights = extract_weights(_opt())
    spec = make_spec(n_layers=2, d_model=32, d_ffn=128)
    x = torch.randn(2, 32)
    dense = DenseFFN(weights)
    for ids in ([np.arange(0)] * 2, [np.arange(128)] * 2):
        hybrid = HybridFFN(weights, placement=make_placement(spec, ids), active="oracle",
                           gpu_backend="sparse_torch", cpu_backend="sparse_torch")
        torch.testing.assert_close(hybrid(1, x), dense(1, x), rtol=1e-5, atol=1e-5)


def test_needs_a_placement_and_a_predictor_when_asked():
    weights = extract_weights(_opt())
    with pytest.raises(ValueError, match="solver=<name>"):
        HybridFFN(weights, gpu_backend="sparse_torch", cpu_backend="sparse_torch")
    with pytest.raises(ValueError, match="needs predictors"):
        HybridFFN(weights, placement=_placement(weights), active="predictor",
                  gpu_backend="sparse_torch", cpu_backend="sparse_torch")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_engine_stops_clearly_without_cuda():
    from types import SimpleNamespace

    engine = HybridEngine()
    loaded = SimpleNamespace(model=_opt(), spec=None, tokenizer=None)
    with pytest.raises(RuntimeError, match="no CUDA device.*engine=sparse_cpu"):
        engine.build_decoder(loaded)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_hybrid_on_gpu_matches_dense():
    model = _opt(d_model=64, d_ffn=256)
    weights = extract_weights(model, dtype=torch.float16, device="cuda")
    hybrid = HybridFFN(weights, placement=_placement(weights), active="oracle")
    dense = DenseFFN(weights)
    x = torch.randn(2, 64, device="cuda", dtype=torch.float16)
    for layer in range(weights.n_layers):
        torch.testing.assert_close(hybrid(layer, x), dense(layer, x), rtol=2e-2, atol=2e-2)
