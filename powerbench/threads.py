"""Thread counts: `torch_threads(n)` sets torch's intra-op thread count inside a block, then
restores it; `doubling_counts(n)` lists the counts a sweep over threads tries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def doubling_counts(up_to: int) -> list[int]:
    """1, 2, 4, ... below `up_to`, then `up_to` itself (at least 1)."""
    counts, t = [], 1
    while t < up_to:
        counts.append(t)
        t *= 2
    return [*counts, max(up_to, 1)]


@contextmanager
def torch_threads(threads: int) -> Iterator[int]:
    """`torch.set_num_threads(threads)` inside the block when threads > 0; yields the count.
    The count is set, and set back after, only where it differs (a per-call use costs
    nothing when it is already in effect, e.g. engine=hybrid's inline CPU part)."""
    import torch  # here, so the thread-count helpers import without torch

    previous = torch.get_num_threads()
    if threads > 0 and threads != previous:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
