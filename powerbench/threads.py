"""`torch_threads(n)`: torch's intra-op thread count set inside a block, then restored."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(threads: int) -> Iterator[int]:
    """`torch.set_num_threads(threads)` inside the block when threads > 0; yields the count."""
    previous = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
