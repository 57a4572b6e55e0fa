"""Which ISA path the CPU kernels run: the best this CPU supports, or the one named by
``$POWERBENCH_CPU_ISA`` (``avx512_bf16`` | ``avx512`` | ``avx2`` | ``portable``; unset,
empty or ``auto``: the best). ``avx512_bf16`` is the AVX-512 path with the bf16 dot product
(``vdpbf16ps``) for bf16 weights at batch > 1; ``avx512`` on such a CPU is its
convert-and-FMA fallback. The C++ extension holds all four paths (``csrc/cpu_isa.h``) and
reports which this CPU can run; this module only decides, so the rule is testable without
a build.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path

from powerbench.ops.errors import CpuIsaError

ISA_ENV = "POWERBENCH_CPU_ISA"
ISAS = ("avx512_bf16", "avx512", "avx2", "portable")  # best first
AUTO = ("", "auto")


def requested_isa(value: str | None = None) -> str | None:
    """The path ``value`` (default: ``$POWERBENCH_CPU_ISA``) names, or None for "the best"."""
    raw = os.environ.get(ISA_ENV, "") if value is None else value
    name = raw.strip().lower()
    if name in AUTO:
        return None
    if name not in ISAS:
        raise CpuIsaError(f"{ISA_ENV}={raw!r} is not a CPU kernel path; valid: "
                          f"{', '.join(ISAS)} (or auto / unset for the best this CPU has)")
    return name


def choose_isa(requested: str | None, supported: Sequence[str]) -> str:
    """``requested`` if this CPU supports it, the best supported path if None."""
    if not supported:
        raise CpuIsaError("the CPU extension reports no kernel path")
    if requested is None:
        return supported[0]
    if requested not in supported:
        raise CpuIsaError(f"{ISA_ENV}={requested}: this CPU ({cpu_model()}) supports only "
                          f"{', '.join(supported)}")
    return requested


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what platform reports)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
