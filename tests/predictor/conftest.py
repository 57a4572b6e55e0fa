"""Fixtures for predictor tests (planted data lives in planted.py)."""

from __future__ import annotations

import pytest
from planted import flat_frequencies, make_profile, planted_layer

from powerbench.profiling.activation_profile import ActivationProfile


@pytest.fixture(scope="session")
def flat_profile() -> ActivationProfile:
    return make_profile([planted_layer(0, flat_frequencies(), seed=1),
                         planted_layer(1, flat_frequencies(), seed=2)])


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls: one thread avoids contention on shared CPUs (restored afterwards)."""
    from powerbench.threads import torch_threads

    with torch_threads(1):
        yield
