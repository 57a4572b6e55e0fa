"""Operator-test fixtures: the backends, built once per session (the CPU extension build
is cached under .cache/torch_extensions afterwards), and the compiled backend on each of
its ISA paths (avx512, avx2, portable; a path this CPU lacks is skipped)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from powerbench.ops import SparseOps, get_backend
from powerbench.ops.isa import ISAS

CPU_BACKENDS = ("sparse_torch", "sparse_cpu")


@pytest.fixture(scope="session")
def backends() -> dict[str, SparseOps]:
    made = {name: get_backend(name, fallback=False) for name in CPU_BACKENDS}
    return made


def on_path(cpu: SparseOps, isa: str) -> Iterator[SparseOps]:
    """`cpu` switched to ISA path `isa` for one test (skipped if this CPU lacks it)."""
    if isa not in cpu.supported_isas():
        pytest.skip(f"this CPU cannot run the {isa} path")
    before = cpu.isa
    cpu.select_isa(isa)
    try:
        yield cpu
    finally:
        cpu.select_isa(before)


@pytest.fixture(params=["sparse_torch", *(f"sparse_cpu-{isa}" for isa in ISAS)])
def ops(request, backends) -> Iterator[SparseOps]:
    """Every backend, the compiled one on every ISA path."""
    name, _, isa = request.param.partition("-")
    if not isa:
        yield backends[name]
        return
    yield from on_path(backends[name], isa)


@pytest.fixture(scope="session")
def cpu_ops(backends) -> SparseOps:
    return backends["sparse_cpu"]


@pytest.fixture(params=ISAS)
def isa(request, cpu_ops) -> Iterator[str]:
    """The test runs once per ISA path this CPU supports, with the kernels on that path."""
    for _ in on_path(cpu_ops, request.param):
        yield request.param


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
