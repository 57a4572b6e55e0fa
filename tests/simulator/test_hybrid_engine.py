"""engine=hybrid: the GPU/CPU split and merge (on the CPU with sparse_torch standing in for
both devices), the clear failure without CUDA, and the real thing on a GPU (marker gpu)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powerbench.engine.ffn import DenseFFN
from powerbench.engine.hybrid import HybridEngine, HybridFFN
from powerbench.engine.hybrid_cpu import ThreadChoice
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


@pytest.mark.parametrize("cpu_part", ["worker", "inline"])
@pytest.mark.parametrize("make", [_opt, _llama], ids=["opt_relu", "llama_reglu"])
@pytest.mark.parametrize("active", ["oracle", "dense"])
def test_split_and_merge_equal_the_dense_ffn(make, active, cpu_part):
    weights = extract_weights(make())
    placement = _placement(weights)
    hybrid = HybridFFN(weights, placement=placement, active=active,
                       gpu_backend="sparse_torch", cpu_backend="sparse_torch",
                       cpu_part=cpu_part)
    assert (hybrid.cpu_runner._worker is None) == (cpu_part == "inline")
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


def test_an_inline_job_runs_its_cpu_part_once():
    from powerbench.engine.hybrid_cpu import CpuJob

    runs = []
    job = CpuJob(None, run=lambda: runs.append(1) or torch.ones(1))
    assert job.result() is job.result() and runs == [1]
    assert CpuJob(None, run=lambda: runs.append(2)).result() is None and runs == [1, 2]


def test_needs_a_placement_and_a_predictor_when_asked():
    weights = extract_weights(_opt())
    with pytest.raises(ValueError, match="cpu_part='thread'"):
        HybridFFN(weights, placement=_placement(weights), active="oracle", cpu_part="thread",
                  gpu_backend="sparse_torch", cpu_backend="sparse_torch")
    with pytest.raises(ValueError, match="solver=<name>"):
        HybridFFN(weights, gpu_backend="sparse_torch", cpu_backend="sparse_torch")
    with pytest.raises(ValueError, match="needs predictors"):
        HybridFFN(weights, placement=_placement(weights), active="predictor",
                  gpu_backend="sparse_torch", cpu_backend="sparse_torch")


def test_thread_choice_keeps_the_fastest_median_and_skips_each_blocks_first_call():
    choice = ThreadChoice.of("auto", 8)
    assert choice.candidates == [1, 2, 4, 8]
    choice = ThreadChoice([1, 2, 4], probe_calls=3)
    # per block: a slow first call (the switch, ignored), then two timed calls
    for threads, times in ((1, [9.0, 3.0, 5.0]), (2, [9.0, 2.0, 2.0]), (4, [0.1, 2.5, 2.5])):
        for t in times:
            assert choice.current() == threads
            choice.record(threads, t)
    assert choice.times == {1: [3.0, 5.0], 2: [2.0, 2.0], 4: [2.5, 2.5]}
    assert choice.chosen == 2 and choice.current() == 2
    assert ThreadChoice.of(3, 8).current() == 3
    with pytest.raises(ValueError, match="cpu_threads=0"):
        ThreadChoice.of(0, 8)


@pytest.mark.parametrize("cpu_part", ["worker", "inline"])
def test_measured_thread_count_keeps_results_and_the_callers_threads(cpu_part):
    weights = extract_weights(_opt())
    spec = make_spec(n_layers=weights.n_layers, d_model=weights.d_model,
                     d_ffn=weights.layers[0].ffn.d_ffn)
    # layer 0 all on the CPU (the output bias travels with it), layer 1 split
    ids = [np.arange(0), np.arange(0, spec.d_ffn, 3)]
    hybrid = HybridFFN(weights, placement=make_placement(spec, ids), active="oracle",
                       gpu_backend="sparse_torch", cpu_backend="sparse_torch",
                       cpu_threads="auto", cpu_part=cpu_part)
    dense = DenseFFN(weights)
    before = torch.get_num_threads()
    choice = hybrid.cpu_runner.threads
    calls = choice.probe_calls * len(choice.candidates) + 2
    with torch.inference_mode():  # as the decoder runs: the worker writes slots made here
        for _ in range(calls):
            x = torch.randn(1, weights.d_model)
            for layer in range(2):
                torch.testing.assert_close(hybrid(layer, x), dense(layer, x), rtol=1e-5,
                                           atol=1e-5)
    assert torch.get_num_threads() == before
    assert hybrid.metrics()["hybrid_cpu_threads"] in choice.candidates


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_engine_stops_clearly_without_cuda():
    from types import SimpleNamespace

    engine = HybridEngine()
    loaded = SimpleNamespace(model=_opt(), spec=None, tokenizer=None)
    with pytest.raises(RuntimeError, match="no CUDA device.*engine=sparse_cpu"):
        engine.build_decoder(loaded)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cpu_part", ["worker", "inline"])
def test_hybrid_on_gpu_matches_dense(cpu_part):
    model = _opt(d_model=64, d_ffn=256)
    weights = extract_weights(model, dtype=torch.float16, device="cuda")
    hybrid = HybridFFN(weights, placement=_placement(weights), active="oracle",
                       cpu_part=cpu_part)
    dense = DenseFFN(weights)
    x = torch.randn(2, 64, device="cuda", dtype=torch.float16)
    for layer in range(weights.n_layers):
        torch.testing.assert_close(hybrid(layer, x), dense(layer, x), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cpu_part", ["worker", "inline"])
def test_hybrid_on_gpu_reuses_its_buffers_safely_over_many_calls(cpu_part):
    """Decode-shaped calls in inference mode (the bench's), every layer each step: the
    pinned output slots and x buffers are reused while copies are in flight; layer 0 lies
    wholly on the CPU (no GPU part: the CPU part's y, or its output bias, alone)."""
    from powerbench.engine.synthetic import synthetic_decoder_weights

    spec = make_spec(n_layers=3, d_model=64, d_ffn=256)  # torch alone: no transformers
    weights = synthetic_decoder_weights(spec, torch.float16, device="cuda")
    ids = [np.arange(0)] + [np.arange(0, 256, 2)] * (weights.n_layers - 1)
    hybrid = HybridFFN(weights, placement=make_placement(spec, ids), active="oracle",
                       cpu_threads="auto", cpu_part=cpu_part)
    dense = DenseFFN(weights)
    with torch.inference_mode():
        for _ in range(3 * hybrid.cpu_runner.threads.probe_calls):
            for rows in (1, 1, 3):
                x = torch.randn(rows, 64, device="cuda", dtype=torch.float16)
                n = weights.n_layers  # each layer thrice: every slot reused in flight
                outs = [(hybrid(i % n, x), dense(i % n, x)) for i in range(3 * n)]
                for got, want in outs:  # compared after every call was enqueued
                    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        x = torch.full((1, 64), -50.0, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(hybrid(0, x), dense(0, x), rtol=2e-2, atol=2e-2)
    metrics = hybrid.metrics()
    assert 0.0 < metrics["hybrid_gpu_neuron_load_share"] < 1.0
    assert metrics["hybrid_gpu_ffn_ms_per_decode_call"] > 0.0
