"""The `local` profile's engine-kernel rates: selection by (dtype, threads), JSON round
trip, the cost model charging them, and calibrations averaging them."""

from __future__ import annotations

import dataclasses

import numpy as np

from powerbench.hardware.hardware_profile import HardwareProfile, KernelRates
from powerbench.measure.calibration import time_average
from powerbench.simulator.config import SimulatorConfig
from powerbench.simulator.cost import CostModel, PassShape
from powerbench.simulator.rates import cpu_rates
from powerbench.simulator.workload import ffn_work, token_groups
from powerbench.solver.placement import CPU
from tests.simulator.factories import GB, make_hardware, make_placement, make_profile, make_spec


def _kernel(dtype: str, threads: int, bw: float, op_s: float = 5e-6,
            call_s: float = 0.0) -> KernelRates:
    return KernelRates(dtype=dtype, threads=threads, stream_bw=bw, gemm_flops=1e30,
                       attention_flops=1e30, op_s=op_s, sparse_call_s=call_s)


def _with_kernels(*kernels: KernelRates) -> HardwareProfile:
    hw = make_hardware(cpu_bw=100 * GB, gpu_bw=None)
    cpu = dataclasses.replace(hw.cpu, kernels=kernels)
    return dataclasses.replace(hw, units={"cpu": cpu})


def test_kernel_selection_by_dtype_and_threads():
    hw = _with_kernels(_kernel("fp16", 1, 4 * GB), _kernel("fp16", 2, 6 * GB),
                       _kernel("fp32", 1, 8 * GB))
    assert hw.cpu.kernel("fp16", 1).stream_bw == 4 * GB
    assert hw.cpu.kernel("fp16", 4).stream_bw == 6 * GB  # most threads <= 4
    assert hw.cpu.kernel("fp16", None).stream_bw == 6 * GB  # every core
    assert hw.cpu.kernel("fp32", 2).stream_bw == 8 * GB
    assert hw.cpu.kernel("int4", 1) is None


def test_round_trip_keeps_kernels():
    hw = _with_kernels(_kernel("fp16", 2, 6 * GB))
    again = HardwareProfile.from_dict(hw.to_dict())
    assert again.cpu.kernels == hw.cpu.kernels


def test_cost_model_charges_the_kernel_of_its_dtype_and_threads():
    """Dense CPU decode of one fp16 layer at 1 thread: weights / the 1-thread fp16 stream
    rate + operators x its op cost (not the tier's 100 GB/s)."""
    hw = _with_kernels(_kernel("fp16", 1, 4 * GB, op_s=10e-6), _kernel("fp16", 2, 8 * GB))
    cfg = SimulatorConfig(cpu_threads=1)
    rates = cpu_rates(hw, cfg, "fp16")
    assert rates.bandwidth == 4 * GB and rates.op_s == 10e-6
    assert cpu_rates(hw, cfg, "fp32").bandwidth == 100 * GB  # not measured: the tier's
    spec = make_spec()
    placement = make_placement(spec, [np.array([], dtype=np.int64)], attn=CPU, lm_head=CPU)
    model = CostModel(spec, placement, hw, cfg)
    profile = make_profile(spec, [np.ones((1, 256), dtype=bool)])
    work = ffn_work(spec, profile, placement, cfg.mode, token_groups(1, 1, 1), rows=1)
    ffn = model.forward(work, PassShape.decode(np.array([4]), 1)).layer["ffn"][0, 0]
    neuron_bytes = 2 * 64 * 2
    expected = 256 * neuron_bytes / (4 * GB) + cfg.cpu_ops.ffn_sparse * 10e-6
    assert np.isclose(ffn, expected)


def test_sparse_call_cost_comes_from_the_kernel_unless_configured():
    hw = _with_kernels(_kernel("fp16", 1, 4 * GB, op_s=0.0, call_s=20e-6))
    spec = make_spec()
    placement = make_placement(spec, [np.array([], dtype=np.int64)], attn=CPU, lm_head=CPU)
    one = np.array([1.0])
    base = CostModel(spec, placement, hw, SimulatorConfig(cpu_threads=1))
    assert np.isclose(base.ffn_device(CPU, one, one)[0] - 2 * 64 * 2 / (4 * GB), 20e-6)
    given = CostModel(spec, placement, hw, SimulatorConfig(cpu_threads=1, cpu_sparse_call_us=5))
    assert np.isclose(given.ffn_device(CPU, one, one)[0] - 2 * 64 * 2 / (4 * GB), 5e-6)


def test_time_average_of_calibrations_averages_their_kernels():
    """Harmonic mean of rates (a byte's mean cost), arithmetic mean of per-call costs."""
    a = _with_kernels(_kernel("fp16", 1, 2 * GB, op_s=4e-6))
    b = _with_kernels(_kernel("fp16", 1, 6 * GB, op_s=8e-6))
    k = time_average(a, b).cpu.kernels[0]
    assert np.isclose(k.stream_bw, 3 * GB) and np.isclose(k.op_s, 6e-6)
    # each calibration kept, in time order: the in-run spread validate shows
    assert k.samples["stream_bw"] == [2 * GB, 6 * GB] and k.samples["op_s"] == [4e-6, 8e-6]


def test_measured_kernels_are_sane_and_cached(tmp_path):
    """The engines' kernels measured at toy shapes: positive rates per (dtype, threads),
    kept in the cache (a second load measures nothing)."""
    from powerbench.hardware.config import LocalHardwareConfig
    from powerbench.measure import local_kernels

    cfg = LocalHardwareConfig(cache_file=str(tmp_path / "local.json"), storage=False,
                              mem_mb=16, gemv_dim=256, gemm_dim=64, repeats=1, threads=[1],
                              sync_iters=50, kernel_dtypes=["fp32", "fp16"], kernel_threads=[1],
                              kernel_width=128, kernel_ffn=512, kernel_working_set_mb=4,
                              kernel_prompt_rows=8, kernel_heads=2, kernel_head_dim=16,
                              kernel_repeats=2, kernel_samples=2, kernel_sample_window_s=0)
    hw = local_kernels.load_local(cfg)
    assert {(k.dtype, k.threads) for k in hw.cpu.kernels} == {("fp32", 1), ("fp16", 1)}
    for k in hw.cpu.kernels:
        assert 1e7 < k.stream_bw < 1e13 and 1e6 < k.gemm_flops < 1e14
        assert 1e-8 < k.op_s < 1e-2 and k.sparse_call_s >= 0
        assert len(k.samples["stream_bw"]) == 2  # the median of two samples, both kept
        assert min(k.samples["stream_bw"]) <= k.stream_bw <= max(k.samples["stream_bw"])
    window = hw.meta["kernel_window"]  # when and under what load they were sampled
    assert window["started"].endswith("UTC") and window["seconds"] >= 0
    calls = []
    again = local_kernels.load_measured(cfg, measure_kernels=lambda *a: calls.append(a) or (),
                                        kernel_code=local_kernels.kernel_code_version())
    assert not calls and again.cpu.kernels == hw.cpu.kernels
