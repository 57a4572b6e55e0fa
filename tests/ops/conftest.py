"""Operator-test fixtures: the backends, built once per session (the CPU extension build
is cached under .cache/torch_extensions afterwards)."""

from __future__ import annotations

import pytest
import torch

from powerbench.ops import SparseOps, get_backend

CPU_BACKENDS = ("sparse_torch", "sparse_cpu")


@pytest.fixture(scope="session")
def backends() -> dict[str, SparseOps]:
    made = {name: get_backend(name, fallback=False) for name in CPU_BACKENDS}
    return made


@pytest.fixture(params=CPU_BACKENDS)
def ops(request, backends) -> SparseOps:
    return backends[request.param]


@pytest.fixture(scope="session")
def cpu_ops(backends) -> SparseOps:
    return backends["sparse_cpu"]


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
