"""The cost model on hand-computed cases: one layer, round bandwidths, no overheads."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.simulator.config import ComputeMode
from powerbench.simulator.cost import CostModel, PassShape
from powerbench.simulator.prefill import stream_prefill
from powerbench.simulator.workload import ffn_work, token_groups
from powerbench.solver.placement import CPU, GPU

from .factories import (
    GB,
    make_hardware,
    make_placement,
    make_profile,
    make_spec,
    zero_overhead_config,
)

# toy spec: d_model 64, d_ffn 256, 4 heads, vocab 100, ReLU (2 matrices), fp16
NEURON_B = 2 * 64 * 2  # 256 bytes per neuron
ATTN_B = 4 * 64 * 64 * 2  # 32768 bytes of Q, K, V, O
KV_TOKEN_B = 2 * 64 * 2  # K and V of one token: 256 bytes
LM_HEAD_B = 100 * 64 * 2  # 12800 bytes
X_B = 64 * 2  # one activation row in fp16: 128 bytes


def _one_token_trace(gpu_active: int, cpu_active: int) -> np.ndarray:
    """Token 0 activates `gpu_active` of neurons 0..127 and `cpu_active` of 128..255."""
    mask = np.zeros((1, 256), dtype=bool)
    mask[0, :gpu_active] = True
    mask[0, 128:128 + cpu_active] = True
    return mask


def _decode_costs(hw, gpu_active=10, cpu_active=40, context=10, mode=ComputeMode.sparse,
                  attn=GPU):
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)], attn=attn, lm_head=attn)
    profile = make_profile(spec, [_one_token_trace(gpu_active, cpu_active)])
    cfg = zero_overhead_config(mode=mode)
    model = CostModel(spec, placement, hw, cfg, predictor_bytes=np.zeros(1))
    work = ffn_work(spec, profile, placement, mode, token_groups(1, 1, 1), rows=1)
    return model.forward(work, PassShape.decode(np.array([context]), 1)), work


def test_one_layer_hand_computed():
    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=100 * GB, link_bw=1 * GB, sync_s=10e-6)
    costs, work = _decode_costs(hw)
    assert work.gpu_active[0, 0] == 10 and work.cpu_active[0, 0] == 40
    embedding = X_B / 100e9
    attention = (ATTN_B + 10 * KV_TOKEN_B) / 100e9
    gpu_ffn = 10 * NEURON_B / 100e9
    to_cpu = (X_B + 128) / 1e9  # layer input + one mask byte per CPU neuron
    cpu_ffn = 40 * NEURON_B / 10e9
    back = X_B / 1e9
    ffn = max(gpu_ffn, to_cpu + cpu_ffn + back)
    lm_head = LM_HEAD_B / 100e9
    logits = 10e-6 + 100 * 4 / 1e9  # sync + fp32 logits to the host
    expected = embedding + attention + ffn + 10e-6 + lm_head + logits
    assert costs.total[0] == pytest.approx(expected, rel=1e-12)
    assert costs.layer["attention@gpu"][0, 0] == pytest.approx(attention)
    assert costs.layer["ffn"][0, 0] == pytest.approx(to_cpu + cpu_ffn + back)
    assert costs.layer["sync"][0, 0] == pytest.approx(10e-6)
    assert costs.busy["ffn@gpu"][0, 0] == pytest.approx(gpu_ffn)
    assert costs.busy["ffn@cpu"][0, 0] == pytest.approx(cpu_ffn)
    assert costs.bytes_read[CPU][0] == pytest.approx(40 * NEURON_B)


def test_overlap_takes_the_max_not_the_sum():
    # GPU slow enough that its branch binds: the CPU branch is hidden under it
    slow_gpu = make_hardware(cpu_bw=10 * GB, gpu_bw=0.1 * GB, link_bw=1 * GB, sync_s=10e-6)
    costs, _ = _decode_costs(slow_gpu, gpu_active=100, cpu_active=4)
    gpu_ffn = 100 * NEURON_B / 0.1e9
    cpu_branch = (X_B + 128) / 1e9 + 4 * NEURON_B / 10e9 + X_B / 1e9
    assert gpu_ffn > cpu_branch
    assert costs.layer["ffn"][0, 0] == pytest.approx(gpu_ffn)
    assert costs.layer["ffn"][0, 0] < gpu_ffn + cpu_branch
    assert not costs.cpu_bound[0, 0]
    # and the other way round: the CPU branch binds
    costs, _ = _decode_costs(make_hardware(), gpu_active=4, cpu_active=100)
    assert costs.cpu_bound[0, 0]
    assert costs.layer["ffn"][0, 0] == pytest.approx(
        (X_B + 128) / 1e9 + 100 * NEURON_B / 10e9 + X_B / 1e9)


def test_no_sync_when_a_layer_lives_on_one_device():
    spec = make_spec()
    placement = make_placement(spec, [np.arange(256)])  # every neuron on the GPU
    profile = make_profile(spec, [_one_token_trace(10, 40)])
    model = CostModel(spec, placement, make_hardware(), zero_overhead_config(),
                      predictor_bytes=np.zeros(1))
    work = ffn_work(spec, profile, placement, ComputeMode.sparse, token_groups(1, 1, 1), 1)
    costs = model.forward(work, PassShape.decode(np.array([10]), 1))
    assert costs.layer["sync"].sum() == 0
    assert costs.layer["ffn"][0, 0] == pytest.approx(50 * NEURON_B / 100e9)


def test_dense_mode_computes_every_placed_neuron():
    hw = make_hardware()
    costs, work = _decode_costs(hw, mode=ComputeMode.dense)
    assert work.gpu_computed[0, 0] == 128 and work.cpu_computed[0, 0] == 128
    assert work.gpu_active[0, 0] == 10  # the load split still counts active neurons
    assert costs.busy["ffn@cpu"][0, 0] == pytest.approx(128 * NEURON_B / 10e9)


def test_predicted_over_true_inflates_and_caps():
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)])
    profile = make_profile(spec, [_one_token_trace(10, 100)])
    work = ffn_work(spec, profile, placement, ComputeMode.sparse, token_groups(1, 1, 1), 1,
                    ratio=np.array([2.0]))
    assert work.gpu_computed[0, 0] == 20
    assert work.cpu_computed[0, 0] == 128  # capped at the neurons the CPU holds


def test_kernel_launches_bound_tiny_gpu_work_and_cpu_ops_add():
    from powerbench.simulator.config import OpCounts, SimulatorConfig

    spec = make_spec()
    hw = make_hardware(launch_s=5e-6)
    cfg = SimulatorConfig(gpu_ops=OpCounts(attention=20), cpu_ops=OpCounts(attention=20),
                         cpu_op_us=2.0)
    gpu_model = CostModel(spec, make_placement(spec, [np.arange(256)]), hw, cfg)
    cpu_model = CostModel(spec, make_placement(spec, [np.arange(0)], attn=CPU, lm_head=CPU),
                          hw, cfg)
    shape = PassShape.decode(np.array([10]), 1)
    roof_gpu = (ATTN_B + 10 * KV_TOKEN_B) / 100e9
    assert gpu_model.attention(0, shape)[0] == pytest.approx(max(roof_gpu, 20 * 5e-6))
    roof_cpu = (ATTN_B + 10 * KV_TOKEN_B) / 10e9
    assert cpu_model.attention(0, shape)[0] == pytest.approx(roof_cpu + 20 * 2e-6)


def test_compute_bound_when_flops_are_scarce():
    spec = make_spec()
    hw = make_hardware(cpu_flops=1e9)
    model = CostModel(spec, make_placement(spec, [np.arange(0)], attn=CPU, lm_head=CPU), hw,
                      zero_overhead_config())
    rows = 64
    t = model.ffn_device(CPU, np.array([256.0]), np.array([256.0 * rows]))[0]
    assert t == pytest.approx(2 * 128 * 256 * rows / 1e9)  # 2 FLOP x params x rows


def test_token_skip_charges_each_tokens_own_neurons():
    """Two tokens with disjoint active sets: bytes follow the union (both sets), FLOPs the
    (neuron, token) pairs with `token_skip` (PowerInfer's operators), else union x rows."""
    spec = make_spec()
    mask = np.zeros((2, 256), dtype=bool)
    mask[0, 128:148] = True  # token 0: 20 CPU neurons
    mask[1, 148:178] = True  # token 1: 30 others
    placement = make_placement(spec, [np.arange(128)])
    profile = make_profile(spec, [mask])
    groups = token_groups(2, 2, 1)
    skip = ffn_work(spec, profile, placement, ComputeMode.sparse, groups, 2, token_skip=True)
    union = ffn_work(spec, profile, placement, ComputeMode.sparse, groups, 2)
    dense = ffn_work(spec, profile, placement, ComputeMode.dense, groups, 2, token_skip=True)
    assert skip.cpu_computed[0, 0] == union.cpu_computed[0, 0] == 50
    assert skip.cpu_token_computed[0, 0] == 20 + 30
    assert union.cpu_token_computed[0, 0] == 50 * 2
    assert dense.cpu_token_computed[0, 0] == 128 * 2  # dense: every neuron, every token
    hw = make_hardware(cpu_flops=1e9)
    model = CostModel(spec, placement, hw, zero_overhead_config())
    t = model.ffn_device(CPU, skip.cpu_computed[:, 0], skip.cpu_token_computed[:, 0])[0]
    assert t == pytest.approx(max(2 * 128 * 50 / 1e9, 50 * 128 * 2 / (10 * GB)))


def test_stream_prefill_hand_computed():
    """A 64-token prompt: dense on the GPU, the CPU's 128 neurons streamed over the link."""
    spec = make_spec()
    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=100 * GB, link_bw=1 * GB, gpu_flops=1e12)
    placement = make_placement(spec, [np.arange(128)])
    profile = make_profile(spec, [np.ones((64, 256), dtype=bool)])
    model = CostModel(spec, placement, hw, zero_overhead_config(), predictor_bytes=np.zeros(1))
    work = ffn_work(spec, profile, placement, ComputeMode.dense, token_groups(64, 64, 1), 64)
    costs = stream_prefill(model, work, PassShape.prefill(64, 1))
    flops = 2 * 16384 * 64 + 4 * 4 * 16 * (64 * 65 / 2) + 2 * 128 * 256 * 64
    local = 64 * KV_TOKEN_B + 128 * NEURON_B + ATTN_B
    host = 128 * NEURON_B
    layer = max(flops / 1e12, local / 100e9 + host / 1e9)
    assert costs.layer["gpu_dense"][0, 0] + costs.layer["weight_stream"][0, 0] == \
        pytest.approx(layer)
    assert costs.layer["weight_stream"][0, 0] > 0


def test_unified_memory_shares_one_bandwidth():
    """Phone SoC: CPU and NPU read the same DRAM, so concurrent FFN parts cannot each get
    their own bandwidth: the FFN takes at least all its bytes / the shared bandwidth."""
    from dataclasses import replace

    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=10 * GB, sync_s=0.0)
    units = dict(hw.units)
    units["gpu"] = replace(units["gpu"], memory="dram", effective_bw=8 * GB)
    units["cpu"] = replace(units["cpu"], effective_bw=6 * GB)
    phone = replace(hw, units=units, link=None,
                    memories={"dram": replace(hw.memories["dram"], effective_bw=9 * GB)})
    assert phone.unified
    costs, _ = _decode_costs(phone, gpu_active=100, cpu_active=100)
    separate = max(100 * NEURON_B / 8e9, 100 * NEURON_B / 6e9)  # no link copies: unified
    shared = 200 * NEURON_B / 9e9
    assert shared > separate
    assert costs.layer["ffn"][0, 0] == pytest.approx(shared)


def _one_layer_busy(mode=ComputeMode.sparse, **cfg):
    """Each device's FFN busy time in the one-layer case (10 GPU, 40 CPU neurons active,
    one decode row) under zero_overhead_config(mode, **cfg)."""
    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=100 * GB, link_bw=1 * GB, sync_s=10e-6)
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)])
    profile = make_profile(spec, [_one_token_trace(10, 40)])
    work = ffn_work(spec, profile, placement, mode, token_groups(1, 1, 1), rows=1)
    model = CostModel(spec, placement, hw, zero_overhead_config(mode=mode, **cfg),
                      predictor_bytes=np.zeros(1))
    return model.forward(work, PassShape.decode(np.array([10]), 1)).busy


def test_sparse_cpu_call_cost_is_added_once_per_cpu_ffn_call():
    busy = {extra: _one_layer_busy(cpu_sparse_call_us=extra) for extra in (None, 7.0)}
    assert busy[7.0]["ffn@cpu"][0, 0] == pytest.approx(busy[None]["ffn@cpu"][0, 0] + 7e-6)
    assert busy[7.0]["ffn@gpu"][0, 0] == busy[None]["ffn@gpu"][0, 0]  # CPU calls only
    dense = _one_layer_busy(ComputeMode.dense, cpu_sparse_call_us=7.0)
    assert dense["ffn@cpu"][0, 0] == pytest.approx(
        128 * NEURON_B / 10e9)  # dense calls pay no sparse-call cost


def test_a_thread_bound_sparse_cpu_operator_reads_threads_x_its_rate():
    """cpu_sparse_thread_gb_s: the CPU's sparse FFN reads at min(bandwidth x efficiency,
    threads x rate); threads from cpu_threads, else the host's; dense and GPU unchanged."""
    base = _one_layer_busy()
    assert base["ffn@cpu"][0, 0] == pytest.approx(40 * NEURON_B / 10e9)
    two = _one_layer_busy(cpu_sparse_thread_gb_s=1.0, cpu_threads=2)  # 2 GB/s < 10 GB/s
    assert two["ffn@cpu"][0, 0] == pytest.approx(40 * NEURON_B / 2e9)
    assert two["ffn@gpu"][0, 0] == base["ffn@gpu"][0, 0]
    fast = _one_layer_busy(cpu_sparse_thread_gb_s=6.0, cpu_threads=2)  # 12 GB/s: bandwidth
    assert fast["ffn@cpu"][0, 0] == pytest.approx(base["ffn@cpu"][0, 0])
    assert make_hardware().cpu.threads == 0  # a unit without core figures: one thread
    host = _one_layer_busy(cpu_sparse_thread_gb_s=1.0)
    assert host["ffn@cpu"][0, 0] == pytest.approx(40 * NEURON_B / 1e9)
    dense = _one_layer_busy(ComputeMode.dense, cpu_sparse_thread_gb_s=1.0, cpu_threads=2)
    assert dense["ffn@cpu"][0, 0] == pytest.approx(128 * NEURON_B / 10e9)  # dense: unbound
    with pytest.raises(ValueError, match="cpu_sparse_thread_gb_s is 0"):
        _one_layer_busy(cpu_sparse_thread_gb_s=0.0)


def test_attention_scores_run_at_the_units_attention_rate():
    from dataclasses import replace

    # compute-bound CPU (bandwidth huge): attention time = projections / GEMM rate +
    # scores / attention rate
    hw = make_hardware(cpu_bw=1e6 * GB, gpu_bw=None, cpu_flops=1e9)
    spec = make_spec()
    placement = make_placement(spec, [np.arange(0)], attn=CPU, lm_head=CPU)
    model = CostModel(spec, placement, hw, zero_overhead_config(), predictor_bytes=np.zeros(1))
    shape = PassShape.prefill(8, 1)
    proj = 2.0 * spec.attn_params_per_layer * 8
    scores = 4.0 * spec.n_heads * spec.head_dim * 36  # 8 x 9 / 2 causal pairs
    assert model.attention(0, shape)[0] == pytest.approx((proj + scores) / 1e9)
    slow = replace(hw, units={"cpu": replace(hw.cpu, effective_attention_flops=1e8)})
    model = CostModel(spec, placement, slow, zero_overhead_config(), predictor_bytes=np.zeros(1))
    assert model.attention(0, shape)[0] == pytest.approx(proj / 1e9 + scores / 1e8)


def test_gpu_sparse_call_host_time_joins_its_launches():
    """GPU side of a sparse FFN call: max(roofline, ops x launch + gpu_sparse_call_us)."""
    from powerbench.simulator.config import OpCounts, SimulatorConfig

    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=100 * GB, link_bw=1 * GB, sync_s=10e-6,
                       launch_s=5e-6)
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)])
    profile = make_profile(spec, [_one_token_trace(10, 40)])
    work = ffn_work(spec, profile, placement, ComputeMode.sparse, token_groups(1, 1, 1), rows=1)
    shape = PassShape.decode(np.array([10]), 1)
    ops = OpCounts(attention=0, predictor=0, ffn_dense=0, ffn_sparse=3, lm_head=0)
    busy = {}
    for call_us in (None, 40.0):
        cfg = SimulatorConfig(gpu_ops=ops, cpu_ops=ops, cpu_op_us=0.0, cpu_sparse_call_us=0.0,
                              gpu_sparse_call_us=call_us)
        model = CostModel(spec, placement, hw, cfg, predictor_bytes=np.zeros(1))
        busy[call_us] = model.forward(work, shape).busy
    # 10 neurons x 256 B at 100 GB/s = 25.6 ns of roofline: launch-bound either way
    assert busy[None]["ffn@gpu"][0, 0] == pytest.approx(3 * 5e-6)
    assert busy[40.0]["ffn@gpu"][0, 0] == pytest.approx(3 * 5e-6 + 40e-6)
    assert busy[40.0]["ffn@cpu"][0, 0] == busy[None]["ffn@cpu"][0, 0]  # GPU calls only


@pytest.mark.parametrize("gpu_bw", [100 * GB, 0.001 * GB], ids=["cpu_bound", "gpu_bound"])
def test_hybrid_host_part_of_the_round_trip_runs_in_series(gpu_bw):
    """A 100 us round trip of which 30 us is the home host's own: CPU-branch bound, the FFN
    time is unchanged (those 30 us were inside the trip); GPU-branch bound, it grows by
    exactly 30 us (the host issued them around its launches)."""
    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=gpu_bw, link_bw=1 * GB, sync_s=10e-6)
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)])
    profile = make_profile(spec, [_one_token_trace(10, 40)])
    work = ffn_work(spec, profile, placement, ComputeMode.sparse, token_groups(1, 1, 1), rows=1)
    shape = PassShape.decode(np.array([10]), 1)
    ffn = {}
    for host_us in (None, 30.0):
        cfg = zero_overhead_config(hybrid_roundtrip_us=100.0, hybrid_host_us=host_us)
        model = CostModel(spec, placement, hw, cfg, predictor_bytes=np.zeros(1))
        ffn[host_us] = model.forward(work, shape).layer["ffn"][0, 0]
    t_gpu = 10 * NEURON_B / gpu_bw
    # CPU branch: x and 128 mask bytes over, 40 neurons at 10 GB/s, y back, trip - sync
    t_cpu = (X_B + 128) / 1e9 + 40 * NEURON_B / 10e9 + X_B / 1e9 + 90e-6
    assert ffn[None] == pytest.approx(max(t_gpu, t_cpu))
    if t_cpu > t_gpu:
        assert ffn[30.0] == pytest.approx(ffn[None])
    else:
        assert ffn[30.0] == pytest.approx(t_gpu + 30e-6)
