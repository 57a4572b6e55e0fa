"""A validation row reports the rates the twin was charged: the profile's engine-kernel
entry of the run's dtype and thread count, not the generic microbenchmarks."""

from __future__ import annotations

import dataclasses
import math

import pytest

from powerbench.hardware.hardware_profile import KernelRates
from powerbench.measure.twin import EngineValidation
from powerbench.simulator.config import OpCounts
from powerbench.tasks.validate import validation_row
from tests.simulator.factories import GB, make_hardware


def _validation(hw) -> EngineValidation:
    measured = {"decode_tokens_per_s": 10.0, "prefill_tokens_per_s": 100.0}
    simulated = {"sim_decode_tokens_per_s": 11.0, "sim_prefill_tokens_per_s": 90.0,
                 "sim_end_to_end_tokens_per_s": 9.0}
    errors = {"sim_error_pct": 10.0, "sim_prefill_error_pct": -10.0,
              "end_to_end_tokens_per_s": 9.5, "sim_end_to_end_error_pct": -5.3}
    ops = OpCounts(attention=9, predictor=0, ffn_dense=3, ffn_sparse=0, lm_head=14)
    return EngineValidation("dense", measured, simulated, errors, ops, "profile", hw)


def test_row_shows_the_kernel_entry_of_the_runs_dtype_and_threads():
    kernels = tuple(KernelRates(dtype="fp16", threads=t, stream_bw=t * 20 * GB,
                                gemm_flops=t * 30e9, attention_flops=t * 10e9,
                                op_s=t * 1e-6, sparse_call_s=t * 5e-6) for t in (1, 2))
    hw = make_hardware(cpu_bw=100 * GB, gpu_bw=None)
    hw = dataclasses.replace(hw, units={"cpu": dataclasses.replace(hw.cpu, kernels=kernels)})
    row = validation_row(_validation(hw), {"model": "m"}, "fp16", 2)
    assert row["cpu_bw_gb_s"] == pytest.approx(40.0)  # not the tier's 100 GB/s
    assert row["cpu_gflops"] == pytest.approx(60.0)
    assert row["cpu_attention_gflops"] == pytest.approx(20.0)
    assert row["op_us"] == pytest.approx(2.0) and row["sparse_call_us"] == pytest.approx(10.0)
    one = validation_row(_validation(hw), {"model": "m"}, "fp16", 1)
    assert one["cpu_bw_gb_s"] == pytest.approx(20.0)
    generic = validation_row(_validation(hw), {"model": "m"}, "fp32", 1)  # no fp32 entry
    assert generic["cpu_bw_gb_s"] == pytest.approx(100.0)
    assert math.isnan(generic["cpu_bw_spread_pct"]) and math.isnan(one["cpu_gflops_min"])


def test_row_carries_the_spread_of_the_kernels_samples():
    """Stream samples 16, 20, 24 GB/s: range 16-24, spread 100 x 8 / 20 = 40%; GEMM
    samples 60, 66 GFLOP/s: spread 100 x 6 / 63 = 9.5%."""
    kernel = KernelRates(dtype="fp32", threads=1, stream_bw=20 * GB, gemm_flops=63e9,
                         attention_flops=1e9, op_s=1e-6, sparse_call_s=0.0,
                         samples={"stream_bw": [24 * GB, 16 * GB, 20 * GB],
                                  "gemm_flops": [60e9, 66e9]})
    hw = make_hardware(cpu_bw=100 * GB, gpu_bw=None)
    hw = dataclasses.replace(hw, units={"cpu": dataclasses.replace(hw.cpu, kernels=(kernel,))})
    row = validation_row(_validation(hw), {}, "fp32", 1)
    assert row["cpu_bw_min_gb_s"] == pytest.approx(16.0)
    assert row["cpu_bw_max_gb_s"] == pytest.approx(24.0)
    assert row["cpu_bw_spread_pct"] == pytest.approx(40.0)
    assert row["cpu_gflops_min"] == pytest.approx(60.0)
    assert row["cpu_gflops_spread_pct"] == pytest.approx(100 * 6 / 63)


def _row(engine: str, variant: str, decode: float, prefill: float, bw: float) -> dict:
    return {"engine": engine, "hardware_variant": variant, "sim_error_pct": decode,
            "sim_prefill_error_pct": prefill, "cpu_bw_gb_s": bw, "cpu_gflops": 150.0}


def test_tolerance_note_names_the_cells_outside_and_why():
    from powerbench.tasks.validate import tolerance_note

    rows = [_row("dense", "profile", 36.0, 3.0, 58.7), _row("dense", "calibrated", 3.5, 2.0, 43.0),
            _row("sparse_cpu", "profile", 14.9, -20.0, 58.7),
            _row("sparse_cpu", "calibrated", 10.0, -19.0, 43.0)]
    note = tolerance_note(rows)
    assert "dense decode +36.0%: the in-run calibration gives +3.5%" in note
    assert "(58.7 then, 43 GB/s now)" in note  # no samples: no range to give
    assert "sparse_cpu prefill -20.0%: the in-run calibration is off too (-19.0%)" in note
    assert "sparse_cpu decode" not in note and "dense prefill" not in note  # within 15%
    assert tolerance_note(rows[1:2]).startswith("every cell")


def test_tolerance_note_gives_the_range_the_profile_sampled():
    """Profile 24 GB/s from samples 20-26; the in-run rate 17 lies outside that range."""
    profile = {**_row("dense", "profile", 40.0, 3.0, 24.0), "cpu_bw_min_gb_s": 20.0,
               "cpu_bw_max_gb_s": 26.0}
    inside = {**profile, "engine": "sparse_cpu"}
    rows = [profile, _row("dense", "calibrated", 2.0, 2.0, 17.0), inside,
            _row("sparse_cpu", "calibrated", 2.0, 2.0, 21.0)]
    from powerbench.tasks.validate import tolerance_note

    note = tolerance_note(rows)
    assert "(24 then, its samples 20-26; 17 GB/s now, outside that range)" in note
    assert "(24 then, its samples 20-26; 21 GB/s now)" in note


def test_tolerance_note_tells_a_speed_change_during_the_run():
    """The in-run calibration off too (+31%) but each round within 1% of the calibrations
    beside it: the machine's speed changed during the run, not a model miss."""
    from powerbench.tasks.validate import tolerance_note

    profile = _row("dense", "profile", 1.0, 97.0, 22.6)
    calibrated = {**_row("dense", "calibrated", -2.0, 31.0, 21.9), "cpu_gflops": 100.0,
                  "sim_prefill_error_paired_pct": 0.7, "cpu_gflops_min": 74.5,
                  "cpu_gflops_max": 155.0}
    note = tolerance_note([profile, calibrated])
    assert ("dense prefill +97.0%: the in-run calibration is off too (+31.0%) but each round "
            "against the calibrations beside it gives +0.7%") in note
    assert "(its calibrations 74.5-155 GFLOP/s; the profile's 150)" in note
    missed = {**calibrated, "sim_prefill_error_paired_pct": 20.0}
    assert "do not measure what the engine does" in tolerance_note([profile, missed])
    moving = {**missed, "cpu_gflops_spread_pct": 53.0}  # the calibrations spread > 15%
    note = tolerance_note([profile, moving])
    assert ("while the calibrations themselves spread 53% (its calibrations 74.5-155 GFLOP/s; "
            "the profile's 150): the machine's speed changed during the run by more than the "
            "tolerance, so this run cannot tell drift from a model miss") in note
