"""The cached `local` profile follows the code its engine-kernel rates were measured with:
a change of the CPU extension's sources (or the Python that calls them) re-measures it."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from powerbench.hardware import local as local_mod
from powerbench.hardware.config import LocalHardwareConfig
from powerbench.hardware.hardware_profile import KernelRates
from powerbench.measure import local_kernels

QUICK = dict(storage=False, mem_mb=16, gemv_dim=256, gemm_dim=64, repeats=1, threads=[1],
             sync_iters=50, cuda=False, kernel_dtypes=["fp32"], kernel_threads=[1])


def _rates(cfg: LocalHardwareConfig, cpus: int) -> tuple[KernelRates, ...]:
    return (KernelRates(dtype="fp32", threads=1, stream_bw=1e10, gemm_flops=1e11,
                        attention_flops=1e10, op_s=5e-6, sparse_call_s=1e-6),)


def test_other_kernel_code_remeasures_the_cached_profile(tmp_path, monkeypatch, caplog):
    cfg = LocalHardwareConfig(cache_file=str(tmp_path / "local.json"), **QUICK)
    calls = []
    real = local_mod.measure_local

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(local_mod, "measure_local", counting)
    first = local_mod.load_local(cfg, measure_kernels=_rates, kernel_code="aaaa")
    assert json.loads((tmp_path / "local.json").read_text())["kernel_code"] == "aaaa"
    again = local_mod.load_local(cfg, measure_kernels=_rates, kernel_code="aaaa")
    assert len(calls) == 1 and again.measured_at == first.measured_at  # same code: reused
    with caplog.at_level(logging.INFO, logger=local_mod.__name__):
        local_mod.load_local(cfg, measure_kernels=_rates, kernel_code="bbbb")
    assert len(calls) == 2  # the kernels changed: measured again, and the record says so
    assert "code hash aaaa, now bbbb" in caplog.text and "remeasuring" in caplog.text
    assert json.loads((tmp_path / "local.json").read_text())["kernel_code"] == "bbbb"
    # a profile measured without the engine kernels does not depend on their code
    plain = LocalHardwareConfig(cache_file=str(tmp_path / "plain.json"),
                                **{**QUICK, "kernel_dtypes": []})
    local_mod.load_local(plain, measure_kernels=_rates, kernel_code="aaaa")
    local_mod.load_local(plain, measure_kernels=_rates, kernel_code="cccc")
    assert len(calls) == 3


def test_a_profile_cached_before_the_code_was_recorded_is_measured_again(tmp_path,
                                                                         monkeypatch):
    cfg = LocalHardwareConfig(cache_file=str(tmp_path / "local.json"), **QUICK)
    local_mod.load_local(cfg, measure_kernels=_rates, kernel_code="aaaa")
    path = tmp_path / "local.json"
    record = json.loads(path.read_text())
    del record["kernel_code"]
    cache, key = local_mod._cache(cfg)
    cache.store(key, lambda p: p.write_text(json.dumps(record)))  # a valid older entry
    calls = []
    monkeypatch.setattr(local_mod, "measure_local",
                        lambda *a, **k: calls.append(1) or pytest.fail("stop"))
    with pytest.raises(pytest.fail.Exception):
        local_mod.load_local(cfg, measure_kernels=_rates, kernel_code="aaaa")
    assert calls == [1]


def _copy_kernel_code(dst):
    for f in local_kernels.kernel_code_files():
        target = dst / f.relative_to(local_kernels.PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, target)
    return dst


def test_the_kernel_code_hash_follows_the_cpu_sources(tmp_path):
    """Any CPU source of the extension (headers included) or the Python that calls it
    changes the hash; a CUDA-only source does not."""
    root = _copy_kernel_code(tmp_path / "pkg")
    before = local_kernels.kernel_code_version(root)
    assert before == local_kernels.kernel_code_version(local_kernels.PACKAGE)
    (root / "ops" / "csrc" / "sparse_cuda_kernels.cu").write_text("// a CUDA change\n")
    assert local_kernels.kernel_code_version(root) == before
    header = root / "ops" / "csrc" / "sparse_cpu_kernels_impl.h"
    header.write_text(header.read_text() + "\n// a kernel change\n")
    changed = local_kernels.kernel_code_version(root)
    assert changed != before
    linear = root / "engine" / "linear.py"
    linear.write_text(linear.read_text().replace("MAX_ROWS = 8", "MAX_ROWS = 4"))
    assert local_kernels.kernel_code_version(root) not in (before, changed)
    linear.unlink()
    with pytest.raises(FileNotFoundError, match="engine/linear.py"):
        local_kernels.kernel_code_version(root)


def test_the_local_target_records_the_code_hash(tmp_path, monkeypatch):
    monkeypatch.setattr(local_kernels, "measure_kernels", _rates)
    cfg = LocalHardwareConfig(cache_file=str(tmp_path / "local.json"), **QUICK)
    local_kernels.load_local(cfg)
    record = json.loads((tmp_path / "local.json").read_text())
    assert record["kernel_code"] == local_kernels.kernel_code_version()
