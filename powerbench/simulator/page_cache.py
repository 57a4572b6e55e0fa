"""An LRU page cache at block granularity: what llama.cpp's mmap-ed weights keep in DRAM.

The DRAM left after the resident parts holds `capacity` blocks (one readahead window of a
layer's FFN each) in ONE least-recently-used list over all layers, as the kernel's page
cache does for one file. Every layer call touches its computed blocks in ascending order
(llama.cpp scans a tensor front to back); the ones not cached are paged in and the least
recently used blocks are evicted. Under a dense model's cyclic per-token scan of more
blocks than fit, LRU evicts exactly the blocks needed next, so nearly every block misses
(the classic LRU scan pathology); with MoE routing only routed experts are touched.

Linux's page cache is not a pure LRU (active / inactive lists, refault detection), which
can keep part of a cyclic scan resident; pure LRU is the pessimistic end, the old fixed
resident share (every token reads exactly the bytes that do not fit) the optimistic end.

LRU without per-block Python work: every access is appended to a log with its position;
a block's latest position is its recency. Eviction walks the log from its head and takes
entries that are still the block's latest access (older ones are stale); total work is
linear in the number of accesses. A call is processed in chunks of at most capacity / 64
blocks (at least 1): hits are decided at a chunk's start, so a chunk's own misses cannot
evict its later blocks before they are touched. The result is exact LRU for chunks of one
block and differs from it by at most one chunk's evictions per chunk otherwise.
"""

from __future__ import annotations

import numpy as np

CHUNK_DIVISOR = 64  # a call is replayed in chunks of capacity / 64 blocks (docstring)


class PageCacheLRU:
    def __init__(self, n_blocks: int, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"page cache capacity must be >= 0 blocks, got {capacity}")
        self.capacity = int(min(capacity, n_blocks))
        self.cached = np.zeros(n_blocks, dtype=bool)
        self.last = np.full(n_blocks, -1, dtype=np.int64)  # position of the latest access
        self.log = np.zeros(1024, dtype=np.int64)
        self.size = 0  # log entries written
        self.head = 0  # first log entry not yet walked by eviction
        self.n_cached = 0

    def access(self, blocks: np.ndarray) -> int:
        """Touch distinct `blocks` (global ids) in the order given; returns the misses
        (blocks paged in)."""
        blocks = np.asarray(blocks, dtype=np.int64)
        step = max(1, self.capacity // CHUNK_DIVISOR)
        return sum(self._access(blocks[i:i + step]) for i in range(0, blocks.size, step))

    def _access(self, blocks: np.ndarray) -> int:
        if blocks.size == 0:
            return 0
        missing = blocks[~self.cached[blocks]]
        self._append(blocks)
        if self.capacity == 0:
            return int(missing.size)
        self.cached[missing] = True
        self.n_cached += int(missing.size)
        self._evict(self.n_cached - self.capacity)
        return int(missing.size)

    def _append(self, blocks: np.ndarray) -> None:
        need = self.size + blocks.size
        if need > self.log.size:
            live = self.log[self.head:self.size]  # compact: drop walked entries
            grown = np.zeros(max(2 * (live.size + blocks.size), 1024), dtype=np.int64)
            grown[:live.size] = live
            self.last[self.cached] -= self.head
            self.log, self.size, self.head = grown, live.size, 0
        pos = np.arange(self.size, self.size + blocks.size)
        self.log[pos] = blocks
        self.last[blocks] = pos
        self.size += blocks.size

    def _evict(self, n: int) -> None:
        while n > 0:
            stop = min(self.size, self.head + max(4 * n, 1024))
            if stop == self.head:
                raise RuntimeError("page cache log exhausted with blocks left to evict")
            chunk = self.log[self.head:stop]
            pos = np.arange(self.head, stop)
            valid = np.flatnonzero((self.last[chunk] == pos) & self.cached[chunk])
            take = valid[:n]
            self.cached[chunk[take]] = False
            self.n_cached -= int(take.size)
            n -= int(take.size)
            self.head = self.head + int(take[-1]) + 1 if n == 0 else stop
