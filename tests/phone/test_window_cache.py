"""LLM in a Flash's sliding window (powerbench.simulator.window_cache), by hand."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.simulator.window_cache import SlidingWindowCache


def test_window_counts_misses_and_forgets_after_k_tokens():
    c = SlidingWindowCache(1, 6, window=2, capacity=[6])
    assert c.access(0, np.array([0, 1])) == 2
    assert c.access(0, np.array([1, 2])) == 1  # 1 from the previous token
    assert c.access(0, np.array([3])) == 1
    assert c.resident(0, np.array([0, 1, 2, 3])).tolist() == [False, True, True, True]
    assert c.access(0, np.array([0, 2, 3])) == 1  # 0 left the window two tokens ago


def test_window_layers_are_independent_and_bad_windows_are_refused():
    c = SlidingWindowCache(2, 4, window=1, capacity=[4, 4])
    c.access(0, np.array([1]))
    assert c.resident(1, np.array([1])).tolist() == [False]
    with pytest.raises(ValueError, match="window_tokens"):
        SlidingWindowCache(1, 4, window=0, capacity=[4])
