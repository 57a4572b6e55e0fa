"""The cached `local` profile's key: quick settings never write or read the real entry."""

from __future__ import annotations

import json

import pytest

from powerbench.hardware.config import LocalHardwareConfig
from powerbench.hardware.local import _cache, measurement_settings


def test_default_settings_keep_the_real_entry_other_settings_their_own(tmp_path, monkeypatch):
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path))
    cache, key = _cache(LocalHardwareConfig())
    assert key == "local" and cache.path(key) == tmp_path / "hardware" / "local.json"
    assert _cache(LocalHardwareConfig(remeasure=True))[1] == "local"  # not a setting
    quick = _cache(LocalHardwareConfig(kernel_working_set_mb=8, repeats=1))[1]
    assert quick.startswith("local-") and quick != "local"
    assert _cache(LocalHardwareConfig(kernel_working_set_mb=8, repeats=1))[1] == quick
    assert _cache(LocalHardwareConfig(mem_mb=64))[1] not in ("local", quick)
    assert _cache(LocalHardwareConfig(cache_file=str(tmp_path / "x.json"), mem_mb=64))[1] == "x"
    assert "remeasure" not in measurement_settings(LocalHardwareConfig())


def test_the_stream_matrices_are_a_measurement_setting(tmp_path, monkeypatch):
    """A profile whose stream test read other matrices is not the default entry."""
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path))
    assert measurement_settings(LocalHardwareConfig())["kernel_stream"] == "layer"
    assert _cache(LocalHardwareConfig(kernel_stream="ffn_up"))[1] != "local"


def test_the_sampling_window_is_a_measurement_setting(tmp_path, monkeypatch):
    """A profile sampled once (or over another window) is not the default entry."""
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path))
    settings = measurement_settings(LocalHardwareConfig())
    assert settings["kernel_samples"] == 7 and settings["kernel_sample_window_s"] == 120.0
    once = _cache(LocalHardwareConfig(kernel_samples=1))[1]
    assert once != "local" and _cache(LocalHardwareConfig(kernel_sample_window_s=30))[1] \
        not in ("local", once)


def test_the_profile_is_kept_under_the_runs_cache_dir(tmp_path, monkeypatch):
    """`cache_dir=` (the run's setting) decides where the measured profile is kept: the
    default cache is never written; a broken entry there is measured again."""
    from powerbench.hardware import load_hardware
    from powerbench.hardware import local as local_mod

    default, run = tmp_path / "default", tmp_path / "run"
    monkeypatch.setenv("POWERBENCH_CACHE", str(default))
    quick = LocalHardwareConfig(mem_mb=16, gemv_dim=256, gemm_dim=64, repeats=1, threads=[1],
                                sync_iters=50, cuda=False, storage=True, storage_mb=8,
                                storage_seconds=0.01, storage_queue_depths=[1],
                                kernel_dtypes=[])
    profile = load_hardware(quick, cache_dir=run)
    stored = run / "hardware" / f"{_cache(quick)[1]}.json"  # the key the settings give
    assert stored.exists() and "flash" in profile.memories
    assert not (default / "hardware").exists() or not any((default / "hardware").iterdir())
    monkeypatch.setattr(local_mod, "measure_local",
                        lambda *_: pytest.fail("the run's cached profile should be reused"))
    assert load_hardware(quick, cache_dir=run).measured_at == profile.measured_at
    monkeypatch.undo()
    monkeypatch.setenv("POWERBENCH_CACHE", str(default))
    stored.write_text("{ broken")
    assert load_hardware(quick, cache_dir=run).measured_at  # measured again, stored again
    assert stored.read_text().startswith("{") and json.loads(stored.read_text())["profile"]
    assert not (default / "hardware").exists() or not any((default / "hardware").iterdir())
