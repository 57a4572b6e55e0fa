"""`local`: measured by microbenchmarks, sane positive numbers, cached with date and
fingerprint, re-measured on request, on another machine, or when the cache is corrupt."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import pytest

from powerbench.hardware import load_hardware
from powerbench.hardware import local as local_mod
from powerbench.hardware import microbench as mb
from powerbench.hardware.config import LocalHardwareConfig

QUICK = dict(mem_mb=32, gemv_dim=512, gemm_dim=128, repeats=2, threads=[1, 2],
             sync_iters=200, cuda_copy_mb=16, storage_mb=32, storage_seconds=0.05,
             kernel_dtypes=[])


@pytest.fixture
def cfg(tmp_path):
    return LocalHardwareConfig(cache_file=str(tmp_path / "hardware" / "local.json"),
                               storage_dir=str(tmp_path), **QUICK)  # scratch file: tmp too


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    path = tmp_path_factory.mktemp("hw") / "local.json"
    cfg = LocalHardwareConfig(cache_file=str(path), storage_dir=str(path.parent), **QUICK)
    return load_hardware(cfg), path


def test_local_numbers_are_sane(measured):
    hw, _ = measured
    assert hw.source == "measured" and hw.name == "local"
    dram = hw.memories["dram"]
    assert 1e8 < dram.effective_bw < 5e12  # 0.1 GB/s .. 5 TB/s
    assert dram.peak_bw is None  # no datasheet for a measured machine
    assert 0 < dram.usable_bytes <= dram.capacity_bytes
    assert set(hw.cpu.gemv_flops) == {1, 2}
    assert all(1e6 < f < 1e13 for f in hw.cpu.gemv_flops.values())
    assert 1e7 < hw.cpu.effective_flops < 1e14
    assert 1e-8 < hw.thread_sync_s < 1e-2
    assert 1e-9 < hw.launch_s < 1e-3
    assert hw.cpu.cores >= 1
    if mb.cuda_available():
        assert hw.has_accelerator and hw.link.h2d_effective_bw > 1e8 and hw.sync_s > 0
    else:
        assert not hw.has_accelerator and hw.gpu_capacity == 0
    assert hw.meta["measure_seconds"] < 30


def test_cache_records_date_and_fingerprint_and_is_reused(measured, monkeypatch):
    hw, path = measured
    record = json.loads(path.read_text())
    assert record["fingerprint"] == local_mod.fingerprint()
    datetime.fromisoformat(record["date"])
    monkeypatch.setattr(local_mod, "measure_local",
                        lambda *_: pytest.fail("cached profile should be reused"))
    again = load_hardware(LocalHardwareConfig(cache_file=str(path), storage_dir=str(path.parent),
                                                **QUICK))
    assert again == hw


def test_remeasure_on_request_other_machine_or_corruption(cfg, monkeypatch):
    first = load_hardware(cfg)
    calls = []
    real = local_mod.measure_local

    def counting(c, kernels=None, cache_dir=None):
        calls.append(1)
        return real(c, kernels, cache_dir)

    monkeypatch.setattr(local_mod, "measure_local", counting)
    load_hardware(dataclasses.replace(cfg, remeasure=True))
    assert len(calls) == 1
    # a cache written on another machine
    monkeypatch.setattr(local_mod, "fingerprint", lambda *_: "another-machine")
    load_hardware(cfg)
    assert len(calls) == 2
    monkeypatch.undo()
    monkeypatch.setattr(local_mod, "measure_local", counting)
    # a corrupt cache entry (checksum mismatch)
    path = local_mod._cache(cfg)[0].path("local")
    path.write_text(path.read_text().replace("dram", "drum", 1))
    hw = load_hardware(cfg)
    assert len(calls) == 3 and hw.memories["dram"].effective_bw > 0
    assert first.fingerprint == hw.fingerprint


def test_gpu_machine_profile_is_assembled_from_cuda_measurements(cfg, monkeypatch):
    """No GPU here: the CUDA microbenchmarks are replaced by fixed readings, and the
    profile must carry them as the accelerator, its memory tier and the PCIe link."""
    monkeypatch.setattr(mb, "cuda_available", lambda: True)
    monkeypatch.setattr(mb, "cuda_device_names", lambda: ["Fake GPU"])
    monkeypatch.setattr(mb, "cuda_device_info", lambda: {
        "name": "Fake GPU", "total_bytes": 24e9, "free_bytes": 23e9, "sm_count": 128})
    monkeypatch.setattr(mb, "cuda_copy_bw", lambda *a, **k: {
        "h2d": 25e9, "d2h": 26e9, "d2d": 900e9})
    monkeypatch.setattr(mb, "cuda_sync_latency", lambda *a, **k: 9e-6)
    monkeypatch.setattr(mb, "cuda_launch_latency", lambda *a, **k: 4e-6)
    monkeypatch.setattr(mb, "cuda_gemm_flops", lambda *a, **k: 300e12)
    hw = load_hardware(cfg)
    assert hw.accelerator == "gpu" and hw.gpu.model == "Fake GPU"
    assert hw.gpu_capacity == 1e9 * 23 and hw.gpu_bw == 900e9
    assert hw.link.h2d_effective_bw == 25e9 and hw.link.d2h_effective_bw == 26e9
    assert hw.sync_s == 9e-6 and hw.launch_s == 4e-6
    assert hw.gpu.effective_flops == 300e12
    assert hw.thread_sync_s is not None and hw.thread_sync_s > 0
    assert hw.meta["facts"]["gpus"] == ["Fake GPU"]
