"""Validation helpers: operator counts from the engine, calibration, error arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powerbench.engine.decoder import Decoder
from powerbench.engine.linear import make_linear
from powerbench.engine.weights import extract_weights
from powerbench.measure.calibration import calibrate_local
from powerbench.measure.op_counts import OpCounter, count_ops
from powerbench.measure.twin import compare, twin_config
from powerbench.simulator.config import ComputeMode, OpCounts, PrefillMode

from .factories import make_hardware
from .factories import opt_model as _opt


@pytest.mark.parametrize("linear", ["torch", "auto"])
def test_op_counts_add_up_to_one_decode_step(linear):
    """The counter sees dispatcher (aten) operators: with torch's projections the dense FFN
    is at least fc1, ReLU, fc2; with our dense kernel (auto, a direct extension call) its
    products are not dispatcher operators, and the ReLU is what is left."""
    decoder = Decoder(extract_weights(_opt(layers=3)), linear=make_linear(linear))
    prompt = torch.tensor([[1, 2, 3, 4]])
    ops = count_ops(decoder, prompt)
    assert ops.attention > 5 and ops.ffn_dense >= (3 if linear == "torch" else 1)
    assert ops.lm_head >= 1
    assert ops.ffn_sparse == 0
    # the same step counted directly
    counter = OpCounter()
    with torch.inference_mode():
        cache = decoder.new_cache(1, 8)
        token = decoder.forward(prompt, cache, last_only=True)[:, -1].argmax(-1)
        with counter:
            decoder.forward(token[:, None], cache)[:, -1].argmax(-1)
    total = sum(counter.counts.values())
    assert total == 3 * (ops.attention + ops.ffn_dense) + ops.lm_head


def test_twin_of_a_cpu_engine():
    ops = count_ops(Decoder(extract_weights(_opt())), torch.tensor([[1, 2]]), sparse=True)
    cfg = twin_config(dense=False, ops=ops, dtype="fp32")
    assert cfg.mode is ComputeMode.sparse and cfg.prefill.mode is PrefillMode.hybrid
    assert cfg.kv_bytes_per_value == 4.0 and cfg.cpu_ops.ffn_sparse == ops.ffn_sparse


def test_calibration_replaces_only_effective_cpu_values():
    hw = make_hardware(gpu_bw=None)
    calibrated, meta = calibrate_local(hw, working_set_bytes=2e6, dim=64, gemm_rows=16,
                                       d_ffn=128)
    assert calibrated.cpu_bw == pytest.approx(meta["calibrated_bw_gb_s"] * 1e9)
    assert calibrated.cpu.effective_flops == pytest.approx(meta["calibrated_gflops"] * 1e9)
    assert calibrated.cpu.effective_flops < 1e20
    assert calibrated.launch_s == pytest.approx(meta["calibrated_op_us"] * 1e-6)
    # a bandwidth was measured (a floor far below any machine's, even under heavy load:
    # 87 MB/s was seen at load 6 against a 100 MB/s floor)
    assert calibrated.cpu_bw > 1e7 and 0 < calibrated.launch_s < 1e-3
    assert hw.cpu_bw == 10e9  # the original is untouched
    assert calibrated.memories == hw.memories
    assert meta["calibrated_sparse_call_us"] >= 0.0  # the fused operator's fixed cost


def test_sparse_call_cost_reaches_the_twin():
    ops = OpCounts(attention=20, predictor=0, ffn_dense=0, ffn_sparse=1, lm_head=3)
    assert twin_config(False, ops, "fp32", sparse_call_us=6.5).cpu_sparse_call_us == 6.5
    assert twin_config(True, ops, "fp32").cpu_sparse_call_us is None


def test_errors_are_relative_to_measurement():
    measured = {"decode_tokens_per_s": 100.0, "prefill_tokens_per_s": 1000.0,
                "prefill_ms": 50.0, "decode_ms": 950.0}
    simulated = {"sim_decode_tokens_per_s": 110.0, "sim_prefill_tokens_per_s": 800.0,
                 "sim_end_to_end_tokens_per_s": 64.0}
    out = compare(measured, simulated, new_tokens=64, batch=1)
    assert out["sim_error_pct"] == pytest.approx(10.0)
    assert out["sim_prefill_error_pct"] == pytest.approx(-20.0)
    assert out["end_to_end_tokens_per_s"] == pytest.approx(64.0)
    assert out["sim_end_to_end_error_pct"] == pytest.approx(0.0)


def test_two_calibrations_average_in_time():
    from dataclasses import replace

    from powerbench.measure.calibration import time_average

    base = make_hardware(gpu_bw=None)
    a = replace(base, units={"cpu": replace(base.cpu, effective_bw=10e9, effective_flops=1e9)},
                launch_s=0.0)
    b = replace(base, units={"cpu": replace(base.cpu, effective_bw=30e9, effective_flops=3e9)},
                launch_s=4e-6)
    avg = time_average(a, b)
    assert avg.cpu_bw == pytest.approx(15e9)  # 1 byte takes (1/10 + 1/30) / 2 ns
    assert avg.cpu.effective_flops == pytest.approx(1.5e9)
    assert avg.launch_s == pytest.approx(2e-6)


def test_validate_engine_compares_each_round_with_its_neighbouring_calibrations(tiny_model):
    from powerbench.config.schema import BenchConfig
    from powerbench.engine.config import DecoderEngineConfig
    from powerbench.measure.twin import validate_engine
    from powerbench.solver import solve
    from powerbench.solver.config import AllCPUConfig

    from .factories import make_profile

    hw = make_hardware(gpu_bw=None)
    spec = tiny_model.spec
    rng = np.random.default_rng(0)
    profile = make_profile(spec, [rng.random((32, spec.neurons_per_layer)) < 0.2
                                  for _ in range(spec.n_layers)])
    placement = solve(AllCPUConfig(), spec, profile, hw)
    bench = BenchConfig(prompt_tokens=8, new_tokens=4, repeats=1, warmup=0)
    calls = []

    def calibrate():
        calls.append(1)
        return hw

    engine = DecoderEngineConfig()
    prompts = ["one two three four five six seven eight nine ten eleven twelve"] * 4
    rows = validate_engine(engine, tiny_model, prompts, bench, profile, placement, hw,
                           calibrate=calibrate, rounds=3)
    assert len(calls) == 4  # before, between and after the three rounds
    variants = {r.hardware_variant: r for r in rows}
    assert set(variants) == {"profile", "calibrated"}
    cal = variants["calibrated"].errors
    assert np.isfinite(cal["sim_error_pct"]) and np.isfinite(cal["sim_error_paired_pct"])
    assert "sim_error_paired_pct" not in variants["profile"].errors
    assert len(variants["calibrated"].measured) and variants["calibrated"].ops.attention > 0
