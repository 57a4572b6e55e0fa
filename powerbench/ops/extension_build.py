"""Build the compiled operator extensions on first use (ninja, cached on disk).

The CPU extension is compiled for the baseline target (no ``-march``): its AVX-512 and AVX2
kernels are separate translation units under ``#pragma GCC target`` (``csrc/cpu_isa.h``), so
one library runs on any x86-64 CPU and picks its path at load; a cache directory shared
between machines stays valid. ``-ffp-contract=off`` keeps every path's rounding the same
(fused multiply-adds only where the kernels ask for them). The
CUDA extension is built with one ``-gencode`` per architecture in :data:`CUDA_ARCHS`.

Build directory: ``$TORCH_EXTENSIONS_DIR`` if set, else ``$POWERBENCH_CACHE/torch_extensions``
with ``POWERBENCH_CACHE`` defaulting to ``<repo>/.cache``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from powerbench.paths import cache_dir

CSRC = Path(__file__).resolve().parent / "csrc"
CPU_SOURCES = ("sparse_cpu_binding.cpp", "cpu_dispatch.cpp", "cpu_isa_avx512_bf16.cpp",
               "cpu_isa_avx512.cpp", "cpu_isa_avx2.cpp", "cpu_isa_portable.cpp", "thread_pool.cpp")
CUDA_SOURCES = ("sparse_cuda_binding.cpp", "sparse_cuda_kernels.cu")
CUDA_KERNEL_SOURCES = ("sparse_cuda_kernels.cu",)
CPU_CFLAGS = ("-O3", "-ffp-contract=off", "-Wall")
CPU_LDFLAGS = ("-pthread",)
CUDA_ARCHS = ("75", "80", "86", "89", "90")
CUDA_ARCHS_ENV = "POWERBENCH_CUDA_ARCHS"
CPU_NAMESPACE = "powerbench_cpu"
CUDA_NAMESPACE = "powerbench_cuda"


def cache_root() -> Path:
    """powerbench's cache directory ($POWERBENCH_CACHE, <checkout>/.cache, or ~/.cache)."""
    return cache_dir()


def extensions_dir() -> Path:
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(env) if env else cache_root() / "torch_extensions"


def cuda_archs() -> tuple[str, ...]:
    """Architectures to build for: $POWERBENCH_CUDA_ARCHS (e.g. "90" or "80,90") or all."""
    env = os.environ.get(CUDA_ARCHS_ENV, "")
    chosen = tuple(a.strip().replace(".", "") for a in env.split(",") if a.strip())
    return chosen or CUDA_ARCHS


def gencode_flags(archs: Sequence[str]) -> list[str]:
    """SASS for every arch plus PTX for the newest, so later GPUs can JIT it."""
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    newest = max(archs, key=int)
    flags.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return flags


def _load(name: str, sources: Sequence[str], verbose: bool, is_python_module: bool = False,
          **kwargs) -> ModuleType | None:
    from torch.utils import cpp_extension  # heavy import, only when building

    build_dir = extensions_dir() / name
    build_dir.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(
        name=name,
        sources=[str(CSRC / s) for s in sources],
        build_directory=str(build_dir),
        is_python_module=is_python_module,
        verbose=verbose,
        **kwargs,
    )


@functools.cache
def load_cpu_extension(verbose: bool = False) -> ModuleType:
    """Build (first time) and load the CPU ops into ``torch.ops.powerbench_cpu``; returns the
    extension module, whose functions are the per-token operators without the dispatcher
    (``csrc/sparse_cpu_binding.cpp``, end)."""
    module = _load(
        CPU_NAMESPACE,
        CPU_SOURCES,
        verbose,
        is_python_module=True,
        extra_cflags=list(CPU_CFLAGS),
        extra_ldflags=list(CPU_LDFLAGS),
    )
    assert module is not None
    return module


@functools.cache
def load_cuda_extension(verbose: bool = False) -> None:
    """Build (first time) and load the CUDA ops into ``torch.ops.powerbench_cuda``."""
    _load(
        CUDA_NAMESPACE,
        CUDA_SOURCES,
        verbose,
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "--use_fast_math", *gencode_flags(cuda_archs())],
        with_cuda=True,
    )


def find_cuda_home() -> Path | None:
    """$CUDA_HOME / $CUDA_PATH, else /usr/local/cuda, else two levels above a real nvcc."""
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env) and (Path(os.environ[env]) / "bin" / "nvcc").exists():
            return Path(os.environ[env])
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return Path("/usr/local/cuda")
    found = shutil.which("nvcc")
    if found and (Path(found).resolve().parent.parent / "include" / "cuda.h").exists():
        return Path(found).resolve().parent.parent
    return None


def find_nvcc() -> str | None:
    home = find_cuda_home()
    return str(home / "bin" / "nvcc") if home else shutil.which("nvcc")


def nvcc_compile_only(
    out_dir: Path, archs: Sequence[str] = CUDA_ARCHS, nvcc: str | None = None,
    optimize: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``nvcc -c`` the plain-CUDA kernel files for ``archs`` (no torch headers needed);
    ``optimize=False``: host, NVVM and ptxas at -O0 (every kernel still parsed, lowered to
    PTX and assembled for each arch, in seconds: the optimiser takes most of the time)."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    out_dir.mkdir(parents=True, exist_ok=True)
    opt = ["-O3"] if optimize else ["-O0", "-Xcicc", "-O0", "-Xptxas", "-O0"]
    cmd = [nvcc, "-c", *opt, "-std=c++17", "-Xcompiler", "-Wall", "--threads",
           str(os.cpu_count() or 1), *gencode_flags(archs)]
    result: subprocess.CompletedProcess[str] | None = None
    for src in CUDA_KERNEL_SOURCES:
        obj = out_dir / (Path(src).stem + ".o")
        result = subprocess.run(
            [*cmd, str(CSRC / src), "-o", str(obj)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            break
    assert result is not None
    return result
