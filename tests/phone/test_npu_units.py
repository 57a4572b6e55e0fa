"""simulator=phone on the NPU: the prompt and (QNN) the decode at the profile's sustained NPU
rate, hand-checked on Bamboo-7B INT4 on the OnePlus 12 profile; QNN needs every weight in
DRAM; the systems' configs compose as documented."""

from __future__ import annotations

import pytest

from powerbench.config import group_config, hydra_context, load_config
from powerbench.hardware import load_hardware
from powerbench.model.loading import spec_from_config
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.simulator.phone import npu_decode_rates, simulate_phone
from powerbench.simulator.phone_config import PhoneSimConfig, PhoneUnit
from powerbench.solver import solve


@pytest.fixture(scope="module")
def qnn_setup():
    with hydra_context():
        cfg = load_config(["experiment=pi2_decode", "experiment/system=qnn",
                           "model=bamboo_7b", "hardware=oneplus12"])
    spec = spec_from_config(group_config("model", "bamboo_7b"))
    profile = synthetic_profile(spec, trace_tokens=16)
    hw = load_hardware(group_config("hardware", "oneplus12"))
    return cfg, spec, profile, hw


def test_qnn_decodes_dense_on_the_npu_at_its_bandwidth_share(qnn_setup):
    cfg, spec, profile, hw = qnn_setup
    assert (cfg.simulator.decode_unit, cfg.simulator.prefill_unit) == (PhoneUnit.npu,) * 2
    rates = npu_decode_rates(cfg.simulator, hw)
    assert rates.bandwidth == pytest.approx(56.0e9 * 0.70)  # NPU-only 56 GB/s x 0.70
    assert rates.flops == pytest.approx(14.5e12)
    placement = solve(cfg.solver, spec, profile, hw, weight_dtype="int4", context=192)
    assert placement.flash is None  # 4 GB of Bamboo INT4 fit the 19 GB
    bench = cfg.bench
    result = simulate_phone(cfg.simulator, spec, profile, placement, hw, bench=bench)
    step_bytes = result.metrics["sim_cpu_bytes_per_step"]  # every weight + KV, every token
    assert step_bytes > 0.95 * spec.total_params * 0.5625
    ms = result.metrics["sim_decode_latency_ms_p50"]
    assert ms == pytest.approx(step_bytes / rates.bandwidth * 1e3, rel=0.05)


def test_qnn_with_ffn_bytes_in_flash_is_infeasible(qnn_setup):
    cfg, spec, profile, hw = qnn_setup
    cfg.solver.ffn_offload_fraction = 0.5
    placement = solve(cfg.solver, spec, profile, hw, weight_dtype="int4", context=192)
    result = simulate_phone(cfg.simulator, spec, profile, placement, hw, bench=cfg.bench)
    assert result.metrics == {"sim_feasible": 0.0}
    assert "infeasible" in result.notes[0]


def test_npu_prefill_needs_the_profiles_sustained_rate(qnn_setup):
    _, spec, profile, hw = qnn_setup
    from dataclasses import replace

    no_rate = replace(hw, units={**hw.units, "npu": replace(hw.gpu, effective_flops=None)})
    cfg = PhoneSimConfig(mode="dense")
    placement = solve(group_config("solver", "pi2_planner"), spec, profile, hw,
                      weight_dtype="int4", context=192)
    with pytest.raises(ValueError, match="effective_tflops"):
        simulate_phone(cfg, spec, profile, placement, no_rate)


def test_llmflash_system_uses_its_own_mechanisms():
    with hydra_context():
        cfg = load_config(["experiment=pi2_decode", "experiment/system=llmflash"])
    assert cfg.simulator.window_tokens == 4 and not cfg.simulator.pipeline
    assert cfg.predictor.ranks(32) == [256] * 28 + [1152] * 4
    assert cfg.solver.strategy.value == "llmflash" and cfg.solver.io_cores == 4


def test_decode_table_names_npu_decode_runs_qnn(tmp_path):
    from powerbench.figures.phone import decode_table, phone_runs
    from powerbench.tracking import Tracker
    from powerbench.tracking.config import TrackingConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="pi2_decode"))
    for name, strategy, unit, tps in (("pi2", "powerinfer2", "cpu", 20.0),
                                      ("llamacpp", "mmap", "cpu", 10.0),
                                      ("qnn", "mmap", "npu", 8.0)):
        with tracker.run(name):
            tracker.log_params({"simulator": {"name": "phone", "decode_unit": unit,
                                              "prefill_unit": unit},
                                "solver": {"strategy": strategy},
                                "hardware": {"name": "oneplus12"},
                                "model": {"name": "bamboo_7b"}})
            tracker.log_metrics({"sim_decode_tokens_per_s": tps, "sim_feasible": 1.0})
    row = decode_table(phone_runs("pi2_decode", uri)).iloc[0]
    assert (row["QNN"], row["llama.cpp"], row["PowerInfer-2"]) == (8.0, 10.0, 20.0)
    assert row["speedup_vs_QNN"] == pytest.approx(2.5)
