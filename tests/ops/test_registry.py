"""Backend selection: names, the fallback chain and its single warning."""

from __future__ import annotations

import warnings

import pytest
import torch

from powerbench.ops import BACKENDS, BackendUnavailable, clear_cache, get_backend, registry


@pytest.fixture
def fresh_registry():
    clear_cache()
    yield
    clear_cache()


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError, match="sparse_torch, sparse_cpu, sparse_cuda"):
        get_backend("sparse_gpu")


def test_backend_names():
    assert BACKENDS == ("sparse_torch", "sparse_cpu", "sparse_cuda")
    assert get_backend("sparse_torch").name == "sparse_torch"


def test_build_failure_falls_back_with_one_warning(monkeypatch, fresh_registry):
    def broken():
        raise BackendUnavailable("C++ extension build failed: error: simulated")

    monkeypatch.setitem(registry._FACTORIES, "sparse_cpu", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops = get_backend("sparse_cpu")
    assert ops.name == "sparse_torch"
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "sparse_cpu" in message and "simulated" in message and "'sparse_torch'" in message
    with pytest.raises(BackendUnavailable, match="simulated"):
        get_backend("sparse_cpu", fallback=False)


def test_unexpected_exception_is_reported_not_swallowed(monkeypatch, fresh_registry):
    def broken():
        raise OSError("disk full")

    monkeypatch.setitem(registry._FACTORIES, "sparse_cpu", broken)
    with pytest.warns(RuntimeWarning, match="disk full"):
        assert get_backend("sparse_cpu").name == "sparse_torch"


def test_whole_chain_in_one_warning(monkeypatch, fresh_registry):
    for name in ("sparse_cuda", "sparse_cpu"):
        monkeypatch.setitem(registry._FACTORIES, name,
                            lambda n=name: (_ for _ in ()).throw(BackendUnavailable(f"no {n}")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops = get_backend("sparse_cuda")
    assert ops.name == "sparse_torch"
    assert len(caught) == 1
    assert "no sparse_cuda" in str(caught[0].message)
    assert "no sparse_cpu" in str(caught[0].message)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_without_gpu_falls_back_to_cpu(backends):
    with pytest.warns(RuntimeWarning, match="no CUDA device") as record:
        ops = get_backend("sparse_cuda")
    assert len(record) == 1
    assert ops.name == "sparse_cpu"


def test_no_warning_when_backend_is_available(backends):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_backend("sparse_cpu").name == "sparse_cpu"


def test_threads_follow_torch(cpu_ops):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert cpu_ops.threads_used() == 1
        torch.set_num_threads(2)
        assert cpu_ops.threads_used() == 2
    finally:
        torch.set_num_threads(before)


def test_single_and_multi_thread_results_agree(cpu_ops):
    g = torch.Generator().manual_seed(3)
    w1, w2_t = torch.randn(512, 300, generator=g), torch.randn(512, 300, generator=g)
    x = torch.randn(3, 300, generator=g)
    idx = torch.randperm(512, generator=g)[:200]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_ops.ffn_relu(x, w1, None, w2_t, None, idx)
        torch.set_num_threads(2)
        two = cpu_ops.ffn_relu(x, w1, None, w2_t, None, idx)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(one, two, rtol=1e-5, atol=1e-4)


def test_package_imports_with_torch_alone():
    """The GPU machine has only torch: importing the ops (and the benchmark module) must not
    pull in mlflow, hydra, matplotlib or the extension builder."""
    import subprocess
    import sys

    code = ("import sys, powerbench.ops, powerbench.ops.bench; "
            "bad = [m for m in ('mlflow', 'hydra', 'matplotlib', 'pandas', "
            "'torch.utils.cpp_extension') if m in sys.modules]; print(bad); "
            "raise SystemExit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
