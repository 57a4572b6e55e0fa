"""The `local` profile samples its engine kernels in rounds spaced over a window and stores
each rate's median, every sample kept (a VM's memory speed drifts in spells of minutes)."""

from __future__ import annotations

import dataclasses

import pytest

from powerbench.hardware.config import LocalHardwareConfig
from powerbench.hardware.hardware_profile import HardwareProfile, KernelRates
from powerbench.measure import local_kernels
from powerbench.measure.local_kernels import median_kernel, spaced_samples


class FakeClock:
    """A clock that moves only when slept on, or by `cost` seconds per measurement."""

    def __init__(self, cost: float) -> None:
        self.now, self.cost, self.starts = 100.0, cost, []

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds

    def measure(self) -> float:
        self.starts.append(self.now - 100.0)
        self.now += self.cost
        return self.now


def test_samples_start_evenly_over_the_window():
    """5 samples over 60 s: started at 0, 15, 30, 45, 60 s (a 2 s measurement waits 13 s)."""
    clock = FakeClock(cost=2.0)
    out = spaced_samples(clock.measure, 5, 60.0, clock=lambda: clock.now, sleep=clock.sleep)
    assert len(out) == 5 and clock.starts == pytest.approx([0, 15, 30, 45, 60])


def test_a_measurement_longer_than_the_step_starts_the_next_at_once():
    """3 samples over 10 s of 8 s each: due at 0, 5, 10 -> started at 0, 8, 16 (no sleep)."""
    clock = FakeClock(cost=8.0)
    spaced_samples(clock.measure, 3, 10.0, clock=lambda: clock.now, sleep=clock.sleep)
    assert clock.starts == pytest.approx([0, 8, 16])


def test_one_sample_never_waits():
    clock = FakeClock(cost=1.0)
    spaced_samples(clock.measure, 1, 120.0, clock=lambda: clock.now, sleep=clock.sleep)
    assert clock.starts == [0.0] and clock.now == 101.0


@pytest.mark.parametrize("samples, window, setting", [(0, 10.0, "kernel_samples: 0"),
                                                      (3, -1.0, "kernel_sample_window_s: -1")])
def test_bad_sampling_settings_are_refused(samples, window, setting):
    with pytest.raises(ValueError, match=setting):
        spaced_samples(lambda: None, samples, window)


def _rates(bw: float, op_s: float) -> KernelRates:
    return KernelRates(dtype="fp16", threads=1, stream_bw=bw, gemm_flops=2 * bw,
                       attention_flops=bw / 2, op_s=op_s, sparse_call_s=0.0, shape={"width": 8})


def test_each_rate_is_the_median_of_its_samples_and_every_sample_is_kept():
    """Stream 24, 17, 20 GB/s -> 20; op 4, 6, 5 us -> 5 us; samples kept in order."""
    k = median_kernel([_rates(24e9, 4e-6), _rates(17e9, 6e-6), _rates(20e9, 5e-6)])
    assert k.stream_bw == 20e9 and k.gemm_flops == 40e9 and k.attention_flops == 10e9
    assert k.op_s == pytest.approx(5e-6) and k.sparse_call_s == 0.0
    assert k.samples["stream_bw"] == [24e9, 17e9, 20e9] and k.shape == {"width": 8}
    hw = HardwareProfile.from_dict(_profile_with(k).to_dict())  # the JSON cache keeps them
    assert hw.cpu.kernels == (k,)


def _profile_with(kernel: KernelRates) -> HardwareProfile:
    from tests.simulator.factories import make_hardware

    hw = make_hardware(gpu_bw=None)
    return dataclasses.replace(hw, units={"cpu": dataclasses.replace(hw.cpu,
                                                                     kernels=(kernel,))})


def test_rounds_measure_every_entry_once_per_sample(monkeypatch):
    """2 dtypes x 1 thread, 3 samples: 3 rounds of both entries, interleaved in time."""
    calls = []

    def fake(cfg, dtype, threads):
        calls.append(dtype)
        return dataclasses.replace(_rates(float(len(calls)), 1e-6), dtype=dtype)

    monkeypatch.setattr(local_kernels, "measure_kernel", fake)
    cfg = LocalHardwareConfig(kernel_dtypes=["fp32", "fp16"], kernel_threads=[1],
                              kernel_samples=3, kernel_sample_window_s=0.0)
    kernels = local_kernels.measure_kernels(cfg, cpus=1)
    assert calls == ["fp32", "fp16"] * 3
    assert [k.dtype for k in kernels] == ["fp32", "fp16"]
    assert kernels[0].samples["stream_bw"] == [1.0, 3.0, 5.0] and kernels[0].stream_bw == 3.0
    assert kernels[1].samples["stream_bw"] == [2.0, 4.0, 6.0]
    assert local_kernels.measure_kernels(dataclasses.replace(cfg, kernel_dtypes=[]), 1) == ()
