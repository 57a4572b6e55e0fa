"""`dense_policy`: `first` (dense parts before any neuron, today's default) vs `impact`
(dense parts and neuron groups in one knapsack by impact per byte), on hand-checked
instances and on paper-scale shapes."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.config import group_config
from powerbench.hardware import load_hardware
from powerbench.model.loading import spec_from_config
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.simulator import ComputeMode, SimulatorConfig, simulate
from powerbench.solver import solve
from powerbench.solver.config import DensePolicy, GreedyConfig, ILPConfig
from powerbench.solver.placement import CPU, GPU

from .conftest import machine, profile_from_counts, tiny_spec

# Hand instance: 2 layers, 40 neurons each, d_model 8 (fp16): M_n = 32 B, attention 512 B,
# KV cache at 64 tokens 2048 B per layer, so one layer's attention item is 2560 B = the
# bytes of all 80 neurons. No buffers, predictors or output projection; C_l off.
HAND = dict(gpu_buffer_gb=0.0, cpu_buffer_gb=0.0, predictor_hidden=0, lm_head_on_gpu=False,
            context=64, communication="off")
ITEM = 512 + 2048


def _hand(counts: np.ndarray, gpu_bytes: float):
    spec = tiny_spec(n_layers=2, d_ffn=40)
    assert spec.neuron_bytes("fp16") == 32 and spec.attn_bytes_per_layer("fp16") == 512
    return spec, profile_from_counts(counts), machine(gpu_bytes, 1e6)


def _config(kind: str, **kw):
    cls = ILPConfig if kind == "ilp" else GreedyConfig
    extra = dict(group_size=1, mip_gap=1e-9) if kind == "ilp" else {}
    return cls(**HAND, **extra, **kw)


@pytest.mark.parametrize("kind", ["ilp", "greedy"])
def test_impact_hot_neurons_beat_a_rarely_read_kv_cache(kind):
    """Every neuron fires 90% of tokens; the GPU holds one attention item or all 80 neurons.
    With 4 of the 64 reserved KV tokens read per step, an attention item is worth
    (512 + 2048 x 4/64) / 32 = 20 neuron-equivalents, the 80 neurons 80 x 0.9 = 72: the
    neurons win. `first` puts layer 0's attention there and no neuron."""
    spec, profile, hw = _hand(np.full((2, 40), 900), ITEM)
    impact = solve(_config(kind, dense_policy="impact", kv_read_tokens=4), spec, profile, hw)
    assert impact.attn_device == [CPU, CPU] and impact.kv_device == [CPU, CPU]
    assert impact.gpu_counts.tolist() == [40, 40]
    assert impact.stats.extra["impact_objective"] == pytest.approx(72.0)
    assert impact.metrics(profile)["gpu_neuron_load_share"] == pytest.approx(1.0)
    assert impact.gpu.total == pytest.approx(ITEM)

    first = solve(_config(kind, dense_policy="first", kv_read_tokens=4), spec, profile, hw)
    assert first.attn_device == [GPU, CPU] and first.gpu_counts.tolist() == [0, 0]
    assert first.metrics(profile)["gpu_neuron_load_share"] == 0.0


@pytest.mark.parametrize("kind", ["ilp", "greedy"])
def test_impact_a_dense_part_read_every_token_beats_cooler_neurons(kind):
    """Same instance, the whole KV cache read every step: an attention item is worth
    2560 / 32 = 80 > 72, so one attention item takes the GPU and no neuron does."""
    spec, profile, hw = _hand(np.full((2, 40), 900), ITEM)
    placement = solve(_config(kind, dense_policy="impact"), spec, profile, hw)
    assert sorted(placement.attn_device) == [CPU, GPU]
    assert placement.gpu_counts.tolist() == [0, 0]
    assert placement.stats.extra["impact_objective"] == pytest.approx(80.0)


@pytest.mark.parametrize("kind", ["ilp", "greedy"])
def test_impact_mixed_hand_instance(kind):
    """Layer 0: 10 neurons at 0.95 and 30 at 0.05; layer 1: 40 at 0.05. GPU: 2880 B = one
    attention item + 10 neurons. KV read 4 of 64 tokens (item worth 20).
    (a) attention + the 10 hot neurons: 20 + 9.5 = 29.5;
    (b) neurons only: 9.5 + 70 x 0.05 = 13 (the 320 B left cannot take an attention item).
    The optimum is (a)."""
    counts = np.full((2, 40), 50)
    counts[0, :10] = 950
    spec, profile, hw = _hand(counts, ITEM + 10 * 32)
    placement = solve(_config(kind, dense_policy="impact", kv_read_tokens=4), spec, profile, hw)
    assert sorted(placement.attn_device) == [CPU, GPU]
    assert placement.gpu_counts.tolist() == [10, 0]
    assert placement.gpu_neurons[0].tolist() == list(range(10))
    assert placement.stats.extra["impact_objective"] == pytest.approx(29.5)


def test_impact_predictors_and_output_projection_are_items():
    """A predictor (read every token, worth its bytes / M_n) beats neurons at 0.5 and may sit
    on the GPU while its layer's attention stays on the host."""
    spec = tiny_spec(n_layers=2, d_ffn=40)
    profile = profile_from_counts(np.full((2, 40), 500))
    pred = 40 * 32.0  # 1280 B per layer = 40 neurons' bytes, worth 40
    hw = machine(2 * pred, 1e6)
    cfg = ILPConfig(**{**HAND, "lm_head_on_gpu": True}, group_size=1, mip_gap=1e-9,
                    dense_policy="impact", kv_read_tokens=4)
    placement = solve(cfg, spec, profile, hw, predictor_bytes=pred)
    # Attention items are worth 20 (KV read 4 of 64 tokens). lm_head (16 x 8 x 2 = 256 B,
    # worth 8) + one predictor + 32 neurons (16) = 64, versus two predictors = 80: both
    # predictors on the GPU, attention and output projection on the host.
    assert placement.predictor_device == [GPU, GPU]
    assert placement.attn_device == [CPU, CPU] and placement.lm_head_device == CPU
    assert placement.gpu.predictors == pytest.approx(2 * pred)
    assert placement.cpu.predictors == 0.0
    assert placement.stats.extra["impact_objective"] == pytest.approx(80.0)


def test_first_is_the_default_policy():
    for name in ("ilp", "greedy"):
        assert group_config("solver", name).dense_policy is DensePolicy.first


def test_impact_on_unified_memory_falls_back_to_first():
    spec, profile = tiny_spec(n_layers=2, d_ffn=40), profile_from_counts(np.full((2, 40), 900))
    hw = machine(0, 1e6, unified=True)
    a = solve(_config("greedy", dense_policy="impact"), spec, profile, hw)
    b = solve(_config("greedy", dense_policy="first"), spec, profile, hw)
    assert a.attn_device == b.attn_device and a.gpu_counts.tolist() == b.gpu_counts.tolist()


# ---- paper-scale shapes ------------------------------------------------------------------
@pytest.fixture(scope="module")
def opt13():
    spec = spec_from_config(group_config("model", "opt_13b"))
    return spec, synthetic_profile(spec, trace_tokens=8)


def _impact_value(placement, spec, profile, context, predictor_hidden=1024):
    """Dense value + FFN value of any sparse placement, in neuron-equivalents."""
    m_n = spec.neuron_bytes("fp16")
    attn = spec.attn_bytes_per_layer("fp16") + spec.kv_cache_bytes(context) / spec.n_layers
    pred = predictor_hidden * (spec.d_model + spec.neurons_per_layer) * 2
    lm = spec.vocab_size * spec.d_model * 2
    dense = (sum(d == GPU for d in placement.attn_device) * attn
             + sum(d == GPU for d in placement.predictor_device) * pred
             + (lm if placement.lm_head_device == GPU else 0.0))
    gpu, _ = placement.layer_load(profile)
    return dense / m_n + gpu.sum()


@pytest.mark.parametrize("communication", ["off", "dense"])
def test_impact_budgets_metrics_and_objective_on_opt13(opt13, communication):
    spec, profile = opt13
    hw = load_hardware(group_config("hardware", "pc_low"))
    out = {}
    for name in ("ilp", "greedy"):
        for policy in ("first", "impact"):
            cfg = group_config("solver", name, dense_policy=policy, communication=communication)
            p = solve(cfg, spec, profile, hw, context=512)
            assert p.gpu.weights + p.cpu.weights == pytest.approx(spec.total_bytes("fp16"),
                                                                  rel=1e-12)
            assert p.gpu.kv_cache + p.cpu.kv_cache == pytest.approx(spec.kv_cache_bytes(512),
                                                                    rel=1e-12)
            assert p.gpu.total <= hw.gpu_capacity + 1 and p.cpu.total <= hw.cpu_capacity + 1
            assert p.kv_device == p.attn_device
            metrics = p.metrics(profile)
            assert 0.0 <= metrics["gpu_neuron_load_share"] <= 1.0
            out[name, policy] = p
    ilp, greedy = out["ilp", "impact"], out["greedy", "impact"]
    assert ilp.stats.extra["impact_objective"] == pytest.approx(
        _impact_value(ilp, spec, profile, 512), rel=1e-9)
    if communication == "dense":  # the ILP enforces C_l with dense parts as items too
        assert ilp.cl_violations == 0
    else:  # same knapsack: the ILP is never below the greedy, nor (within its gap) `first`
        assert ilp.stats.extra["impact_objective"] >= greedy.stats.extra["impact_objective"] - 1e-6
    first_value = _impact_value(out["ilp", "first"], spec, profile, 512)
    assert ilp.stats.extra["impact_objective"] >= 0.99 * first_value
    assert ilp.stats.extra["impact_objective"] <= ilp.stats.extra["impact_upper_bound"] + 1e-6


def test_simulator_runs_a_placement_with_host_attention_and_gpu_neurons(opt13):
    """Impact placements may keep a layer's attention on the host while its hot neurons sit
    on the GPU; the cost model treats that layer as a hybrid one homed on the host."""
    spec, profile = opt13
    hw = load_hardware(group_config("hardware", "pc_low"))
    cfg = group_config("solver", "greedy", dense_policy="impact", kv_read_tokens=1)
    placement = solve(cfg, spec, profile, hw, context=2048)
    cpu_home = [i for i, d in enumerate(placement.attn_device) if d == CPU]
    assert cpu_home and any(placement.gpu_counts[i] > 0 for i in cpu_home)
    result = simulate(SimulatorConfig(mode=ComputeMode.sparse), spec, profile, placement, hw)
    assert np.isfinite(result.metrics["sim_end_to_end_tokens_per_s"])
    assert result.metrics["sim_end_to_end_tokens_per_s"] > 0
