"""The cost model's engine mechanisms on hand-computed one-layer cases: a hybrid layer's
GPU -> CPU -> GPU round trips (one per host merge), the int4 down projection's own kernel
rate on the accelerator, and a serving engine's host time per layer (vLLM)."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.simulator.config import ComputeMode
from powerbench.simulator.cost import CostModel, PassShape
from powerbench.simulator.workload import ffn_work, token_groups
from powerbench.solver.placement import GPU

from .factories import (
    GB,
    make_hardware,
    make_placement,
    make_profile,
    make_spec,
    zero_overhead_config,
)

NEURON_B = 2 * 64 * 2  # toy spec, fp16: 256 bytes per neuron
X_B = 64 * 2


def _hybrid_layer(roundtrip_us=None, gpu_active=10, cpu_active=40, mode=ComputeMode.sparse,
                  **cfg):
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)])
    mask = np.zeros((1, 256), dtype=bool)
    mask[0, :gpu_active] = True
    mask[0, 128:128 + cpu_active] = True
    profile = make_profile(spec, [mask])
    config = zero_overhead_config(mode=mode, hybrid_roundtrip_us=roundtrip_us, **cfg)
    model = CostModel(spec, placement, make_hardware(sync_s=10e-6), config,
                      predictor_bytes=np.zeros(1))
    work = ffn_work(spec, profile, placement, mode, token_groups(1, 1, 1), rows=1)
    return model.forward(work, PassShape.decode(np.array([10]), 1))


def test_roundtrip_sits_on_the_cpu_branch_beyond_one_sync():
    """276 us round trip, 10 us sync: the CPU branch pays 266 us more, the sync stays."""
    base = _hybrid_layer()
    trip = _hybrid_layer(roundtrip_us=276.0)
    cpu_branch = (X_B + 128) / 1e9 + 40 * NEURON_B / 10e9 + X_B / 1e9
    assert base.layer["ffn"][0, 0] == pytest.approx(cpu_branch)
    assert trip.layer["ffn"][0, 0] == pytest.approx(cpu_branch + 266e-6)
    assert trip.layer["sync"][0, 0] == pytest.approx(10e-6)
    assert trip.total[0] - base.total[0] == pytest.approx(266e-6)


def test_each_host_merge_is_one_more_round_trip_with_the_ffn_activation():
    """Two merges (PowerInfer's public code: up, then down): the CPU branch pays 2 x 276 us
    less the one 10 us sync, and the 256-wide fp16 activation (512 B) crosses the 1 GB/s
    link once more each way."""
    one = _hybrid_layer(roundtrip_us=276.0)
    two = _hybrid_layer(roundtrip_us=276.0, hybrid_merges=2)
    cpu_branch = ((X_B + 512 + 128) / 1e9 + 40 * NEURON_B / 10e9 + (X_B + 512) / 1e9
                  + (2 * 276 - 10) * 1e-6)
    assert two.layer["ffn"][0, 0] == pytest.approx(cpu_branch)
    assert two.layer["sync"][0, 0] == pytest.approx(10e-6)
    assert two.total[0] - one.total[0] == pytest.approx(276e-6 + 2 * 512 / 1e9)


def test_hybrid_merges_below_one_is_refused():
    with pytest.raises(ValueError, match="hybrid_merges"):
        _hybrid_layer(roundtrip_us=276.0, hybrid_merges=0)


def _gpu_only_int4(int4_axpy, ffn_kind="relu", mode=ComputeMode.sparse):
    from powerbench.simulator.config import KernelEfficiency

    spec = make_spec(ffn_kind=ffn_kind)
    placement = make_placement(spec, [np.arange(256)], dtype="int4")
    profile = make_profile(spec, [np.ones((1, 256), dtype=bool)])
    eff = KernelEfficiency(int4=0.5, int4_axpy=int4_axpy)
    model = CostModel(spec, placement, make_hardware(), zero_overhead_config(
        mode=mode, efficiency=eff), predictor_bytes=np.zeros(1))
    work = ffn_work(spec, profile, placement, mode, token_groups(1, 1, 1), 1)
    return model, model.forward(work, PassShape.decode(np.array([10]), 1)).layer["ffn"][0, 0]


def test_int4_down_projection_runs_at_its_own_rate_on_the_gpu():
    """ReLU FFN (up + down): 256 neurons x 2 x 64 int4 weights (0.5625 B) at 100 GB/s x
    int4 0.5; the down half at int4_axpy 0.7 of that: (1 + 1/0.7) / 2 = 1.214x; a gated FFN
    (3 matrices): (2 + 1/0.7) / 3 = 1.143x; dense compute (llama.cpp's MMVQ) unaffected."""
    same = 256 * 2 * 64 * 0.5625 / (100e9 * 0.5)
    assert _gpu_only_int4(1.0)[1] == pytest.approx(same)
    model, t = _gpu_only_int4(0.7)
    assert model.int4_axpy_scale == pytest.approx((1 + 1 / 0.7) / 2)
    assert t == pytest.approx(same * (1 + 1 / 0.7) / 2)
    gated, _ = _gpu_only_int4(0.7, ffn_kind="reglu")
    assert gated.int4_axpy_scale == pytest.approx((2 + 1 / 0.7) / 3)
    assert _gpu_only_int4(0.7, mode=ComputeMode.dense)[1] == pytest.approx(same)


def test_roundtrip_hidden_when_the_gpu_branch_is_longer():
    """A GPU branch of 1000 neurons' worth at 0.1 GB/s outlasts the CPU branch + trip."""
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)])
    mask = np.zeros((1, 256), dtype=bool)
    mask[0, :128] = True
    mask[0, 128:130] = True
    hw = make_hardware(gpu_bw=0.01 * GB, sync_s=10e-6)
    model = CostModel(spec, placement, hw, zero_overhead_config(hybrid_roundtrip_us=100.0),
                      predictor_bytes=np.zeros(1))
    work = ffn_work(spec, placement=placement, profile=make_profile(spec, [mask]),
                    mode=ComputeMode.sparse, groups=token_groups(1, 1, 1), rows=1)
    costs = model.forward(work, PassShape.decode(np.array([10]), 1))
    gpu_ffn = 128 * NEURON_B / 0.01e9  # 3.3 ms
    assert costs.layer["ffn"][0, 0] == pytest.approx(gpu_ffn)


def test_no_roundtrip_for_a_layer_on_one_device():
    spec = make_spec()
    placement = make_placement(spec, [np.arange(256)], attn=GPU)
    profile = make_profile(spec, [np.ones((1, 256), dtype=bool)])
    model = CostModel(spec, placement, make_hardware(),
                      zero_overhead_config(hybrid_roundtrip_us=276.0), predictor_bytes=np.zeros(1))
    work = ffn_work(spec, profile, placement, ComputeMode.sparse, token_groups(1, 1, 1), 1)
    costs = model.forward(work, PassShape.decode(np.array([10]), 1))
    assert costs.layer["ffn"][0, 0] == pytest.approx(256 * NEURON_B / 100e9)


def test_host_time_per_layer_adds_to_every_pass():
    """vLLM-style host time: 200 us x 1 layer + 50 us per pass, not overlapped."""
    base = _hybrid_layer(mode=ComputeMode.dense)
    host = _hybrid_layer(mode=ComputeMode.dense, host_layer_us=200.0, host_pass_us=50.0)
    assert host.token["host_overhead"][0] == pytest.approx(250e-6)
    assert host.total[0] - base.total[0] == pytest.approx(250e-6)


def test_token_overlap_shrinks_synthetic_unions_by_the_markov_ratio():
    """A union over independently drawn (synthetic) tokens is scaled by the chain's
    expected union over the independent one; a measured trace is left as it is."""
    from powerbench.simulator.config import TokenOverlapConfig
    from powerbench.simulator.workload import overlap_scale

    spec = make_spec(d_ffn=256)
    rng = np.random.default_rng(0)
    masks = rng.random((64, 256)) < 0.5  # every neuron's frequency ~0.5
    profile = make_profile(spec, [masks])
    placement = make_placement(spec, [np.arange(128)])
    groups = token_groups(64, 2, 32)
    overlap = TokenOverlapConfig(active_fraction=[0.5], rho=[0.5])
    base = ffn_work(spec, profile, placement, ComputeMode.sparse, groups, 2, token_skip=True)
    assert profile.source == "measured"
    same = ffn_work(spec, profile, placement, ComputeMode.sparse, groups, 2, token_skip=True,
                    overlap=overlap)
    np.testing.assert_allclose(same.cpu_active, base.cpu_active)
    profile.source = "synthetic"
    shrunk = ffn_work(spec, profile, placement, ComputeMode.sparse, groups, 2, token_skip=True,
                      overlap=overlap)
    p = profile.layers[0].frequency
    cpu = np.arange(256) >= 128
    # p = 0.5, r = 2, rho = 0.5: 0.625 / 0.75 (hand: see test_union_fraction_hand_checked)
    assert overlap_scale(np.full(4, 0.5), np.ones(4, bool), 2, 0.5) == pytest.approx(0.625 / 0.75)
    np.testing.assert_allclose(shrunk.cpu_active,
                               base.cpu_active * overlap_scale(p, cpu, 2, 0.5))
    np.testing.assert_allclose(shrunk.cpu_token_computed, base.cpu_token_computed)
    single = ffn_work(spec, profile, placement, ComputeMode.sparse, token_groups(64, 1, 64),
                      1, overlap=overlap)  # one token: nothing to overlap
    np.testing.assert_allclose(single.cpu_active.sum(), masks[:, 128:].sum())


def test_token_overlap_interpolates_in_log_active_and_checks_its_points():
    from powerbench.simulator.config import TokenOverlapConfig

    cfg = TokenOverlapConfig(active_fraction=[0.01, 0.1], rho=[0.3, 0.1])
    assert cfg.at(np.sqrt(0.001)) == pytest.approx(0.2)  # halfway in log
    assert cfg.at(0.5) == pytest.approx(0.1) and cfg.at(0.001) == pytest.approx(0.3)
    assert TokenOverlapConfig().at(0.1) == 0.0
    with pytest.raises(ValueError, match="token_overlap.rho"):
        TokenOverlapConfig(active_fraction=[0.1], rho=[1.0])
    with pytest.raises(ValueError, match="points"):
        TokenOverlapConfig(active_fraction=[0.1], rho=[])
