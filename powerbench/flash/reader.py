"""Reads from the weight file that bypass the page cache, through an I/O thread pool.

`DirectReader` opens the file with `O_DIRECT`, so every read goes to the storage device
(what a phone's UFS read costs, not a DRAM copy out of the page cache). `O_DIRECT` needs
the buffer address, the file offset and the length aligned to the logical block size:
buffers come from `aligned_buffer` (an anonymous mmap, page aligned) and the layout
aligns every extent to 4096 bytes. Where the file system refuses `O_DIRECT` (EINVAL at
open or on the first read) the reader falls back to buffered reads with one warning and
`direct` False.

A batch of extents is sorted by file offset; extents that are adjacent in the file are
coalesced into one `preadv` (scatter into their staging places, up to `max_read_bytes`
and `IOV_MAX` pieces). The reads are spread over `io_threads` workers, each issuing its
share one after another: at most `io_threads` reads are in flight (the queue depth).
`os.preadv` releases the GIL, so the workers overlap with compute in the caller.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

IOV_MAX = 1024
BLOCK = 4096


def aligned_buffer(nbytes: int) -> np.ndarray:
    """uint8 [nbytes] backed by an anonymous mmap: page aligned, as O_DIRECT wants."""
    size = max(-(-int(nbytes) // BLOCK) * BLOCK, BLOCK)
    buf = mmap.mmap(-1, size)
    return np.frombuffer(buf, dtype=np.uint8)[:nbytes]


def _open(path: str, flags: int) -> int:
    """os.open (a seam for tests that simulate a file system without O_DIRECT)."""
    return os.open(path, flags)


@dataclass(frozen=True)
class ReadOp:
    """One system call: `pieces` = (dest_offset, length) placed back to back in the file
    from `file_offset` on."""

    file_offset: int
    pieces: tuple[tuple[int, int], ...]

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.pieces)


def coalesce(file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
             max_read_bytes: int = 1 << 20) -> list[ReadOp]:
    """Group extents adjacent in the file into reads (each <= max_read_bytes, unless a
    single extent is longer, and <= IOV_MAX pieces)."""
    order = np.argsort(file_offsets, kind="stable")
    ops: list[ReadOp] = []
    start = end = -1
    pieces: list[tuple[int, int]] = []
    total = 0
    for i in order.tolist():
        off, n, dest = int(file_offsets[i]), int(lengths[i]), int(dest_offsets[i])
        if pieces and off == end and total + n <= max_read_bytes and len(pieces) < IOV_MAX:
            if pieces[-1][0] + pieces[-1][1] == dest:  # contiguous in the buffer too
                pieces[-1] = (pieces[-1][0], pieces[-1][1] + n)
            else:
                pieces.append((dest, n))
            end += n
            total += n
            continue
        if pieces:
            ops.append(ReadOp(start, tuple(pieces)))
        start, end, total, pieces = off, off + n, n, [(dest, n)]
    if pieces:
        ops.append(ReadOp(start, tuple(pieces)))
    return ops


@dataclass
class ReaderStats:
    bytes_read: int = 0
    reads: int = 0  # system calls
    extents: int = 0  # extents asked for (before coalescing)
    busy_s: float = 0.0  # summed time inside preadv over all workers

    def reset(self) -> None:
        self.bytes_read = self.reads = self.extents = 0
        self.busy_s = 0.0


@dataclass
class PendingRead:
    """A submitted batch: `wait()` blocks until every read landed, returns its wall time
    (first submit to last completion)."""

    futures: list[Future] = field(default_factory=list)
    started: float = 0.0
    finished: list[float] = field(default_factory=list)

    def wait(self) -> float:
        for fut in self.futures:
            fut.result()
        return (max(self.finished) - self.started) if self.finished else 0.0


class DirectReader:
    def __init__(self, path: str | os.PathLike, io_threads: int = 4, direct: bool = True,
                 max_read_bytes: int = 1 << 20) -> None:
        if io_threads < 1:
            raise ValueError(f"io_threads must be >= 1, got {io_threads}")
        self.path = str(path)
        self.io_threads = io_threads
        self.max_read_bytes = max_read_bytes
        self.stats = ReaderStats()
        self._lock = threading.Lock()
        self.fd, self.direct = self._open(direct)
        self.pool = ThreadPoolExecutor(io_threads, thread_name_prefix="flash-io")

    def _open(self, direct: bool) -> tuple[int, bool]:
        flag = getattr(os, "O_DIRECT", 0)
        if direct and flag:
            try:
                fd = _open(self.path, os.O_RDONLY | flag)
                try:
                    probe = aligned_buffer(BLOCK)
                    os.preadv(fd, [memoryview(probe)], 0)
                    return fd, True
                except OSError:
                    os.close(fd)
                    raise
            except OSError as err:
                if err.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                warnings.warn(f"O_DIRECT refused for {self.path} ({err.strerror}); flash reads "
                              "go through the page cache", RuntimeWarning, stacklevel=3)
        elif direct:
            warnings.warn("this platform has no O_DIRECT; flash reads go through the page "
                          "cache", RuntimeWarning, stacklevel=3)
        fd = os.open(self.path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        return fd, False

    # ---- reads ------------------------------------------------------------------------------
    def _run(self, ops: list[ReadOp], dest: np.ndarray, pending: PendingRead) -> None:
        mv = memoryview(dest)
        busy, nbytes = 0.0, 0
        for op in ops:
            t0 = time.perf_counter()
            bufs = [mv[a: a + n] for a, n in op.pieces]
            want = op.nbytes
            got = os.preadv(self.fd, bufs, op.file_offset)
            if got != want:  # short read (end of file, signal): finish piece by piece
                self._finish_short(op, mv, got)
            busy += time.perf_counter() - t0
            nbytes += want
        with self._lock:
            self.stats.busy_s += busy
            self.stats.bytes_read += nbytes
            self.stats.reads += len(ops)
            pending.finished.append(time.perf_counter())

    def _finish_short(self, op: ReadOp, mv: memoryview, done: int) -> None:
        pos = op.file_offset
        for a, n in op.pieces:
            if done >= n:
                done -= n
                pos += n
                continue
            a, n, pos = a + done, n - done, pos + done
            done = 0
            while n > 0:
                got = os.preadv(self.fd, [mv[a: a + n]], pos)
                if got <= 0:
                    raise OSError(errno.EIO, f"{self.path}: read past the end at byte {pos} "
                                  "(truncated file?)")
                a, n, pos = a + got, n - got, pos + got

    def submit(self, file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
               dest: np.ndarray) -> PendingRead:
        """Start reading the extents into `dest` (uint8, aligned); returns at once."""
        pending = PendingRead(started=time.perf_counter())
        if len(file_offsets) == 0:
            return pending
        ops = coalesce(file_offsets, lengths, dest_offsets, self.max_read_bytes)
        with self._lock:
            self.stats.extents += len(file_offsets)
        shares = [ops[i:: self.io_threads] for i in range(min(self.io_threads, len(ops)))]
        pending.futures = [self.pool.submit(self._run, share, dest, pending) for share in shares]
        return pending

    def read(self, file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
             dest: np.ndarray) -> float:
        """Blocking `submit`; returns the wall time."""
        return self.submit(file_offsets, lengths, dest_offsets, dest).wait()

    def close(self) -> None:
        if self.fd >= 0:
            self.pool.shutdown(wait=True)
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self) -> DirectReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<DirectReader {Path(self.path).name} direct={self.direct} "
                f"threads={self.io_threads}>")

