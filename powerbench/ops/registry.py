"""Backend registry: ``get_backend(name)`` with the fallback chain
sparse_cuda -> sparse_cpu -> sparse_torch and one warning saying why."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from powerbench.ops.errors import BackendUnavailable, CpuIsaError, summarize

if TYPE_CHECKING:  # each backend imports torch when it is built, not the registry
    from powerbench.ops.interface import SparseOps


def _torch() -> SparseOps:
    from powerbench.ops.torch_backend import TorchSparseOps

    return TorchSparseOps("cpu")


def _cpu() -> SparseOps:
    from powerbench.ops.cpu_backend import CpuSparseOps

    return CpuSparseOps.create()


def _cuda() -> SparseOps:
    from powerbench.ops.cuda_backend import CudaSparseOps

    return CudaSparseOps.create()


_FACTORIES: dict[str, Callable[[], SparseOps]] = {
    "sparse_torch": _torch,
    "sparse_cpu": _cpu,
    "sparse_cuda": _cuda,
}
_FALLBACK: dict[str, str | None] = {
    "sparse_cuda": "sparse_cpu",
    "sparse_cpu": "sparse_torch",
    "sparse_torch": None,
}
BACKENDS: tuple[str, ...] = tuple(_FACTORIES)


@functools.cache
def _create(name: str) -> SparseOps | BackendUnavailable:
    """Build a backend once per process; a failure is remembered, not retried."""
    try:
        return _FACTORIES[name]()
    except CpuIsaError:  # a bad $POWERBENCH_CPU_ISA is the user's to fix, not a fallback
        raise
    except BackendUnavailable as err:
        return err
    except Exception as err:  # anything unexpected still must not pass silently
        return BackendUnavailable(summarize(err))


def clear_cache() -> None:
    """Forget built backends and failures (tests, or after fixing a toolchain)."""
    _create.cache_clear()


def get_backend(name: str, *, fallback: bool = True) -> SparseOps:
    """The backend called ``name``; if it cannot run here, the next one in the chain.

    Falling back emits exactly one ``RuntimeWarning`` naming every backend skipped and why.
    With ``fallback=False`` the reason is raised as :class:`BackendUnavailable`.
    """
    if name not in _FACTORIES:
        raise ValueError(f"unknown sparse backend {name!r}; valid: {', '.join(BACKENDS)}")
    reasons: list[str] = []
    current: str | None = name
    while current is not None:
        made = _create(current)
        if not isinstance(made, BackendUnavailable):
            if reasons:
                warnings.warn(
                    f"sparse backend {name!r} unavailable ({'; '.join(reasons)}); "
                    f"falling back to {current!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return made
        if not fallback:
            raise made
        reasons.append(f"{current}: {made}")
        current = _FALLBACK[current]
    raise BackendUnavailable("; ".join(reasons))  # unreachable: sparse_torch always builds


def available_backends() -> list[str]:
    """Names of the backends that can run here (builds extensions if needed)."""
    return [name for name in BACKENDS if not isinstance(_create(name), BackendUnavailable)]
