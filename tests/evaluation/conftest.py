"""Fixtures for evaluation tests (the toy models live in toy_lm.py)."""

from __future__ import annotations

import pytest
from toy_lm import make_tiny_opt, make_word_tokenizer


@pytest.fixture(scope="session")
def tiny_opt():
    return make_tiny_opt()


@pytest.fixture(scope="session")
def word_tokenizer():
    return make_word_tokenizer()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls: one thread avoids contention on shared CPUs (restored afterwards)."""
    from powerbench.threads import torch_threads

    with torch_threads(1):
        yield
