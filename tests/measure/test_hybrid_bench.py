"""The hybrid benchmark's pieces on the CPU (sparse_torch standing in for both devices):
its placements, the replayed device masks, and one measured row per engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powerbench.engine.decoder import Decoder
from powerbench.engine.hybrid import HybridFFN
from powerbench.engine.sparse import SparseFFN
from powerbench.engine.synthetic import TraceReplay, synthetic_decoder_weights, trace_profile
from powerbench.measure.hybrid_bench import (
    DENSE,
    HybridBenchConfig,
    ReplayMasks,
    hot_neuron_placement,
    hybrid_name,
    layer_offload_placement,
    measure,
)
from powerbench.model.spec import ModelSpec, SparsityStats

SPEC = ModelSpec(name="toy_opt", n_layers=4, d_model=64, d_ffn=512, n_heads=4, n_kv_heads=4,
                 ffn_kind="relu", vocab_size=97, max_positions=128,
                 stats=SparsityStats(token_sparsity=0.9))


@pytest.fixture(scope="module")
def profile():
    return trace_profile(SPEC, SPEC.n_layers, trace_tokens=32)


def test_hot_neurons_are_the_most_frequent_over_all_layers(profile):
    placement = hot_neuron_placement(SPEC, profile, 0.25)
    assert placement.gpu_counts.sum() == round(0.25 * 4 * 512)
    freq = np.stack([layer.frequency for layer in profile.layers])
    on_gpu = np.zeros_like(freq, dtype=bool)
    for i, ids in enumerate(placement.gpu_neurons):
        on_gpu[i, ids] = True
    assert freq[on_gpu].min() >= freq[~on_gpu].max()


def test_layer_offload_puts_the_last_whole_layers_on_the_gpu():
    placement = layer_offload_placement(SPEC, 0.5)
    assert placement.gpu_counts.tolist() == [0, 0, 512, 512]


def test_replayed_masks_are_the_trace_and_restart(profile):
    masks = ReplayMasks(profile, "cpu")
    x = torch.zeros(1, SPEC.d_model)
    first = [masks.predict_mask(i, x).clone() for i in range(SPEC.n_layers)]
    second = masks.predict_mask(0, x)
    assert torch.equal(first[0][0], torch.from_numpy(profile.layers[0].trace_masks()[0]))
    assert torch.equal(second[0], torch.from_numpy(profile.layers[0].trace_masks()[1]))
    masks.rewind()
    assert torch.equal(masks.predict_mask(0, x), first[0])
    wrapped = masks.predict_mask(0, torch.zeros(40, SPEC.d_model))  # past the trace's end
    assert wrapped.shape == (40, SPEC.d_ffn)


def test_hybrid_with_replayed_masks_equals_the_sparse_engine(profile):
    weights = synthetic_decoder_weights(SPEC, torch.float32)
    hybrid = HybridFFN(weights, hot_neuron_placement(SPEC, profile, 0.5),
                       predictors=ReplayMasks(profile, "cpu"), active="predictor",
                       gpu_backend="sparse_torch", cpu_backend="sparse_torch")
    sparse = SparseFFN(weights, "sparse_torch", TraceReplay(profile))
    ids = torch.tensor([[5, 7, 11]])
    a = Decoder(weights, ffn=hybrid).generate(ids, 4, return_logits=True).logits
    b = Decoder(weights, ffn=sparse).generate(ids, 4, return_logits=True).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_measure_gives_one_row_per_engine(profile):
    weights = synthetic_decoder_weights(SPEC, torch.float32)
    cfg = HybridBenchConfig(layers=4, gpu_ffn_shares=(0.5,), rounds=1, new_tokens=3,
                            prompt_tokens=4, cpu_threads=1)
    rows = measure(weights, SPEC, profile, cfg, gpu_backend="sparse_torch",
                   cpu_backend="sparse_torch")
    by = {r["system"]: r for r in rows}
    assert set(by) == {DENSE, "sparse_cuda (all on GPU)", "hybrid 50%", "hybrid 50% inline",
                       "layer offload 50%"}
    assert 0.5 < by["hybrid 50%"]["gpu_neuron_load_share"] < 1.0  # hot neurons on the GPU
    # the same split and active sets, the CPU part on the decoder's thread
    assert (by["hybrid 50% inline"]["gpu_neuron_load_share"]
            == by["hybrid 50%"]["gpu_neuron_load_share"])
    assert by["layer offload 50%"]["gpu_neuron_load_share"] == pytest.approx(0.5)
    assert all(r["decode_tokens_per_s"] > 0 for r in rows)
    assert by["hybrid 50%"]["speedup_vs_layer_offload"] > 0


def test_every_row_gets_its_simulated_twin(profile):
    from tests.simulator.factories import make_hardware

    weights = synthetic_decoder_weights(SPEC, torch.float32)
    cfg = HybridBenchConfig(layers=4, gpu_ffn_shares=(0.5,), rounds=1, new_tokens=3,
                            prompt_tokens=4, cpu_threads=1)
    rows = measure(weights, SPEC, profile, cfg, hardware=make_hardware(),
                   gpu_backend="sparse_torch", cpu_backend="sparse_torch")
    by = {r["system"]: r for r in rows}
    assert all(r["sim_decode_tokens_per_s"] > 0 for r in rows)
    # the cost model charges the CPU's dense half more than the GPU's hot neurons
    assert (by["hybrid 50%"]["sim_decode_tokens_per_s"]
            > by["layer offload 50%"]["sim_decode_tokens_per_s"])


def test_shares_outside_zero_one_and_unknown_cpu_parts_are_refused():
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        HybridBenchConfig(gpu_ffn_shares=(1.0,))
    with pytest.raises(ValueError, match="one or more of worker, inline"):
        HybridBenchConfig(cpu_parts=("thread",))
    with pytest.raises(ValueError, match="each once"):
        HybridBenchConfig(cpu_parts=("worker", "worker"))


def test_hybrid_rows_are_named_by_their_cpu_part():
    assert hybrid_name(0.25, "worker") == "hybrid 25%"
    assert hybrid_name(0.5, "inline") == "hybrid 50% inline"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cpu_part", ["worker", "inline"])
def test_host_costs_are_measured_on_the_gpu(cpu_part):
    from powerbench.measure.hybrid_host import host_costs

    weights = synthetic_decoder_weights(SPEC, torch.float16, device="cuda")
    costs = host_costs(weights, repeats=20, cpu_part=cpu_part)
    assert set(costs) == {"hybrid_roundtrip_us", "hybrid_host_us", "hybrid_host_ops",
                          "gpu_sparse_call_host_us"}
    assert all(0.0 < v < 1e5 for v in costs.values())
    if cpu_part == "worker":  # inline, the whole trip is the decoder thread's
        assert costs["hybrid_host_us"] < costs["hybrid_roundtrip_us"]
    else:
        assert costs["hybrid_host_us"] == costs["hybrid_roundtrip_us"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_op_costs_cover_every_class():
    from powerbench.hardware.microbench import cuda_host_op_costs

    costs = cuda_host_op_costs(d_model=256, heads=4, context=16, iters=20)
    assert {"tiny_kernel", "gemv_addmm", "sdpa_decode", "event_record", "stream_wait_event",
            "d2h_pinned_async", "h2d_pinned_async"} == set(costs)
    assert all(0.0 < v < 0.1 for v in costs.values())


def test_twin_leaves_out_the_hand_offs_of_the_layers_with_a_cpu_part():
    from powerbench.measure.hybrid_bench import _less_handoff_ops
    from powerbench.simulator.config import OpCounts

    ops = OpCounts(attention=20, predictor=0, ffn_dense=0, ffn_sparse=12, lm_head=3)
    # 3 of 4 layers hold CPU neurons: 8 hand-off operators x 3/4 = 6 fewer per layer
    placement = layer_offload_placement(SPEC, 0.25)
    assert placement.gpu_counts.tolist() == [0, 0, 0, 512]
    less = _less_handoff_ops(ops, 8.0, placement)
    assert (less.ffn_sparse, less.ffn_dense, less.attention) == (6, 0, 20)
    dense = _less_handoff_ops(OpCounts(attention=20, predictor=0, ffn_dense=5, ffn_sparse=0,
                                       lm_head=3), 8.0, placement)
    assert (dense.ffn_dense, dense.ffn_sparse) == (0, 0)
