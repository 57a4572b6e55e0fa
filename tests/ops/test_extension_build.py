"""Build plumbing: cache directories, arch flags, and the CUDA sources compiled by nvcc
(compile only: this machine has nvcc but no GPU)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from powerbench.ops import extension_build as build
from powerbench.paths import repo_root

NVCC = build.find_nvcc()


def test_cache_dirs(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.delenv("POWERBENCH_CACHE", raising=False)
    assert build.extensions_dir() == repo_root() / ".cache" / "torch_extensions"
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path))
    assert build.extensions_dir() == tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    assert build.extensions_dir() == tmp_path / "ext"


def test_gencode_flags_cover_turing_to_hopper(monkeypatch):
    monkeypatch.delenv(build.CUDA_ARCHS_ENV, raising=False)
    flags = build.gencode_flags(build.cuda_archs())
    for arch in ("75", "80", "86", "89", "90"):
        assert f"-gencode=arch=compute_{arch},code=sm_{arch}" in flags
    assert "-gencode=arch=compute_90,code=compute_90" in flags  # PTX for newer GPUs
    monkeypatch.setenv(build.CUDA_ARCHS_ENV, "8.0, 90")
    assert build.cuda_archs() == ("80", "90")


def test_cpu_extension_is_cached(cpu_ops):
    built = list((build.extensions_dir() / build.CPU_NAMESPACE).glob("*.so"))
    assert built, "the CPU extension should be in the cache directory"


def _compile(tmp_path, archs, optimize=True):
    result = build.nvcc_compile_only(tmp_path, archs, optimize=optimize)
    assert result.returncode == 0, result.stderr[-3000:]
    objects = list(tmp_path.glob("*.o"))
    assert len(objects) == len(build.CUDA_KERNEL_SOURCES)
    cuobjdump = Path(NVCC).parent / "cuobjdump"
    if cuobjdump.exists():  # check every requested arch got SASS
        listing = subprocess.run([str(cuobjdump), "--list-elf", str(objects[0])],
                                 capture_output=True, text=True, check=False)
        for arch in archs:
            assert f"sm_{arch}" in listing.stdout, listing.stdout


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_cuda_kernels_compile_for_the_oldest_and_newest_arch(tmp_path):
    """One nvcc invocation for the first and last default architectures (sm_75 and sm_90):
    the kernels' only architecture branches are at sm_90 (16-byte atomics, the programmatic
    dependent launch), so these two compile every branch. Unoptimised (-O0 for host, NVVM
    and ptxas): every kernel is still parsed, instantiated, lowered to PTX and assembled for
    both, and an error in either branch fails it; two cores: 47 s at -O3, 3 s at -O0 (the
    optimiser is what costs; the -O3 build itself is the extension's, built and tested on a
    GPU machine by tests/ops/test_cuda.py)."""
    _compile(tmp_path, (build.CUDA_ARCHS[0], build.CUDA_ARCHS[-1]), optimize=False)


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_cuda_binding_compiles_against_torch_headers(tmp_path):
    """Syntax-check the torch binding of the CUDA kernels with the host compiler.

    The CPU torch wheel ships the c10/cuda headers but not the CMake-generated macro
    header, so a one-line stand-in is provided."""
    from torch.utils.cpp_extension import include_paths

    stub = tmp_path / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    cuda_include = build.find_cuda_home() / "include"
    cmd = ["c++", "-std=c++20", "-fsyntax-only", "-Wall", "-DTORCH_EXTENSION_NAME=x",
           f"-I{build.CSRC}", "-isystem", str(tmp_path), "-isystem", str(cuda_include)]
    for path in include_paths():
        cmd += ["-isystem", path]
    result = subprocess.run([*cmd, str(build.CSRC / "sparse_cuda_binding.cpp")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]


def test_cuda_backend_unavailable_reason_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from powerbench.ops.cuda_backend import CudaSparseOps
    from powerbench.ops.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        CudaSparseOps.create()
