"""Reads from the weight file that bypass the page cache, batched and asynchronous.

`DirectReader` opens the file with `O_DIRECT`, so every read goes to the storage device
(what a phone's UFS read costs, not a DRAM copy out of the page cache). `O_DIRECT` needs
the buffer address, the file offset and the length aligned to the logical block size:
buffers come from `aligned_buffer` (an anonymous mmap, page aligned) and the layout
aligns every extent to 4096 bytes. Where the file system refuses `O_DIRECT` (EINVAL at
open or on the first read) the reader falls back to buffered reads with one warning and
`direct` False.

A batch of extents is grouped into reads by `powerbench.flash.read_plan` (neighbours in
the file coalesced into one scatter read). The engines that issue the reads:

- "aio" (default where the kernel allows it): Linux native AIO (`powerbench.flash.aio`),
  the whole batch in one `io_submit`, up to `depth` reads in flight, no threads;
- "uring": the fixed-shape cluster reads (`scatter_reads`) through io_uring with a kernel
  submission thread (`powerbench.flash.uring`: the kernel's per-batch submission work
  leaves the caller), other batches through AIO; needs O_DIRECT;
- "threads": `io_threads` workers, each issuing its share with `os.preadv` one after
  another (queue depth `io_threads`); `preadv` releases the GIL.

Either way `submit` returns at once and the caller computes until `wait()`.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from powerbench.flash.aio import AioBatch, AioContext, ScatterReads
from powerbench.flash.read_plan import ReadOp, ReadPlan, plan_reads
from powerbench.flash.uring import Ring, UringScatter
from powerbench.flash.workers import Task, Workers
from powerbench.hardware.storage import open_direct


def _open(path: str, flags: int) -> int:
    """os.open (a seam for tests that simulate a file system without O_DIRECT)."""
    return os.open(path, flags)


@dataclass
class ReaderStats:
    bytes_read: int = 0
    reads: int = 0  # system calls
    extents: int = 0  # extents asked for (before coalescing)
    busy_s: float = 0.0  # summed time with reads in flight (preadv per worker, or submit to
    # completion per batch)

    def reset(self) -> None:
        self.bytes_read = self.reads = self.extents = 0
        self.busy_s = 0.0


@dataclass
class PendingRead:
    """A submitted batch: `wait()` blocks until every read landed and returns its wall
    time (submit to the last completion the waiter saw)."""

    futures: list[Task] = field(default_factory=list)
    started: float = 0.0
    finished: list[float] = field(default_factory=list)
    batch: AioBatch | ScatterReads | UringScatter | None = None
    on_done: Callable[[], None] | None = None

    collected: bool = False  # wait() has returned or raised

    def wait(self) -> float:
        try:
            return self._wait()
        finally:
            self.collected = True

    def _wait(self) -> float:
        for fut in self.futures:  # threads: the reads; aio: the submission
            fut.result()
        if self.batch is not None:
            if not self.batch.finished:
                self.batch.wait()
            if not self.finished:
                self.finished.append(time.perf_counter())
                if self.on_done is not None:
                    self.on_done()
        return (max(self.finished) - self.started) if self.finished else 0.0


IOEngine = Literal["auto", "aio", "uring", "threads"]


class DirectReader:
    """`engine`: "aio" (Linux native AIO: one system call per batch, up to `depth` reads
    in flight), "threads" (`io_threads` workers issuing `preadv`, queue depth =
    `io_threads`), or "auto" (aio where the kernel allows it and O_DIRECT is in effect).
    `submit_thread`: aio batches are submitted by a pool worker, not the caller."""

    def __init__(self, path: str | os.PathLike, io_threads: int = 4, direct: bool = True,
                 max_read_bytes: int = 1 << 20, engine: IOEngine = "auto",
                 depth: int = 128, submit_thread: bool = False) -> None:
        if io_threads < 1:
            raise ValueError(f"io_threads must be >= 1, got {io_threads}")
        if engine not in ("auto", "aio", "uring", "threads"):
            raise ValueError(f"unknown I/O engine {engine!r}; valid: auto, aio, uring, "
                             "threads")
        self.path = str(path)
        self.io_threads = io_threads
        self.max_read_bytes = max_read_bytes
        self.submit_thread = submit_thread
        self.stats = ReaderStats()
        self._lock = threading.Lock()
        self.fd, self.direct = self._open(direct)
        self.aio: AioContext | None = None
        # native AIO is asynchronous only with O_DIRECT (buffered reads block in io_submit)
        self.ring: Ring | None = None
        if engine == "uring":
            if not self.direct:
                raise ValueError("io_engine uring needs O_DIRECT (buffered reads would run "
                                 "synchronously in the kernel's submission thread)")
            # the fixed-shape reads through io_uring with a kernel submission thread; other
            # batches through native AIO
            self.ring = Ring(2 * depth, sqpoll=True)
        if engine in ("aio", "uring") or (engine == "auto" and self.direct):
            try:
                self.aio = AioContext(depth)
            except OSError as err:
                if engine == "aio":
                    raise
                warnings.warn(f"native AIO unavailable ({err}); flash reads use a thread pool",
                              RuntimeWarning, stacklevel=2)
        self.engine = ("uring" if self.ring is not None else
                       "aio" if self.aio is not None else "threads")
        self.depth = self.aio.depth if self.aio is not None else io_threads
        self.pool = Workers(io_threads)
        self._last: PendingRead | None = None

    def _open(self, direct: bool) -> tuple[int, bool]:
        fd, in_effect = open_direct(self.path, direct, opener=_open)
        if direct and not in_effect:
            why = "refused by the file system" if getattr(os, "O_DIRECT", 0) else \
                "not on this platform"
            warnings.warn(f"O_DIRECT {why} for {self.path}; flash reads go through the page "
                          "cache", RuntimeWarning, stacklevel=3)
        return fd, in_effect

    # ---- reads ------------------------------------------------------------------------------
    def _run(self, ops: list[ReadOp], dests: list[np.ndarray], pending: PendingRead) -> None:
        mvs = [memoryview(d) for d in dests]
        busy, nbytes = 0.0, 0
        for op in ops:
            t0 = time.perf_counter()
            bufs = [mvs[b][a: a + n] for b, a, n in op.pieces]
            want = op.nbytes
            got = os.preadv(self.fd, bufs, op.file_offset)
            if got != want:  # short read (end of file, signal): finish piece by piece
                self._finish_short(op, mvs, got)
            busy += time.perf_counter() - t0
            nbytes += want
        with self._lock:
            self.stats.busy_s += busy
            self.stats.bytes_read += nbytes
            self.stats.reads += len(ops)
            pending.finished.append(time.perf_counter())

    def _finish_short(self, op: ReadOp, mvs: list[memoryview], done: int) -> None:
        pos = op.file_offset
        for b, a, n in op.pieces:
            if done >= n:
                done -= n
                pos += n
                continue
            a, n, pos = a + done, n - done, pos + done
            done = 0
            while n > 0:
                got = os.preadv(self.fd, [mvs[b][a: a + n]], pos)
                if got <= 0:
                    raise OSError(errno.EIO, f"{self.path}: read past the end at byte {pos} "
                                  "(truncated file?)")
                a, n, pos = a + got, n - got, pos + got

    def submit(self, file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
               dest: np.ndarray | list[np.ndarray], buffers: np.ndarray | None = None,
               ) -> PendingRead:
        """Start reading the extents into `dest` (one uint8 buffer, or several with
        `buffers[i]` naming extent i's); returns at once."""
        if self._last is not None and not self._last.collected:  # one batch at a time
            self._last.wait()
        pending = PendingRead(started=time.perf_counter())
        if len(file_offsets) == 0:
            return pending
        plan = plan_reads(file_offsets, lengths, dest_offsets, self.max_read_bytes, buffers)
        return self.submit_plan(plan, dest, len(file_offsets), pending)

    def submit_plan(self, plan: ReadPlan, dest: np.ndarray | list[np.ndarray],
                    n_extents: int | None = None, pending: PendingRead | None = None,
                    ) -> PendingRead:
        """`submit` for reads already grouped (e.g. by a caller that knows its layout)."""
        if pending is None:
            if self._last is not None and not self._last.collected:
                self._last.wait()
            pending = PendingRead(started=time.perf_counter())
        dests = dest if isinstance(dest, list) else [dest]
        with self._lock:
            self.stats.extents += plan.n_reads if n_extents is None else n_extents
        if self.aio is not None:
            bases = np.array([d.ctypes.data for d in dests], dtype=np.uint64)
            pending.batch = self.aio.submit_plan(self.fd, plan, bases, start=False)
            if self.submit_thread:
                # io_submit does the kernel's per-read work (page pinning, block mapping,
                # the device doorbell: costly in a VM) in the caller: hand it to a worker
                # so the caller computes meanwhile (one thread wake per batch)
                pending.futures = [self.pool.submit(pending.batch.start)]
            else:
                pending.batch.start()
            nbytes, nreads = int(plan.op_bytes.sum()), plan.n_reads

            def count() -> None:
                self.stats.bytes_read += nbytes
                self.stats.reads += nreads
                self.stats.busy_s += pending.finished[-1] - pending.started

            pending.on_done = count
        else:
            ops = plan.ops()
            shares = [ops[i:: self.io_threads] for i in range(min(self.io_threads, len(ops)))]
            pending.futures = [self.pool.submit(self._run, share, dests, pending)
                               for share in shares]
        self._last = pending
        return pending

    def scatter_reads(self, n_pieces: int, piece_bytes: int, piece_buf: np.ndarray,
                      dests: list[np.ndarray]) -> ScatterReads | None:
        """Preallocated AIO reads of one shape (`ScatterReads`) into `dests`; None with the
        thread-pool engine."""
        if self.aio is None:
            return None
        bases = np.array([d.ctypes.data for d in dests], dtype=np.int64)
        if self.ring is not None:
            return UringScatter(self.ring, self.fd, n_pieces, piece_bytes, piece_buf, bases,
                                self.aio.depth)
        return ScatterReads(self.aio, self.fd, n_pieces, piece_bytes, piece_buf, bases)

    def submit_scatter(self, reads: ScatterReads | UringScatter, file_offsets: np.ndarray,
                       dest_offsets: np.ndarray) -> PendingRead:
        """Start `reads` (from `scatter_reads`): read j at `file_offsets[j]`, its piece p
        at byte `dest_offsets[j, p]` of its buffer. Returns at once."""
        if self._last is not None and not self._last.collected:
            self._last.wait()
        pending = PendingRead(started=time.perf_counter(), batch=reads)
        if self.submit_thread:  # io_submit's kernel work in a pool worker
            pending.futures = [self.pool.submit(reads.submit, file_offsets, dest_offsets)]
        else:
            reads.submit(file_offsets, dest_offsets)
        n = int(file_offsets.size)
        stats = self.stats
        stats.extents += n

        def count() -> None:
            stats.bytes_read += n * reads.read_bytes
            stats.reads += n
            stats.busy_s += pending.finished[-1] - pending.started

        pending.on_done = count
        self._last = pending
        return pending

    def submitted_scatter(self, reads: ScatterReads, n: int, accepted: int, started: float
                          ) -> PendingRead:
        """A batch of `reads` (from `scatter_reads`) that compiled code submitted itself
        (`powerbench.flash.plan`) at `started`: n > 0 reads, or n = -errno where io_submit
        failed after `accepted` reads went in (those are collected, then OSError)."""
        if n < 0:
            reads.pending = accepted
            reads.wait()
            raise OSError(-n, f"io_submit: {os.strerror(-n)}")
        reads.pending = n
        stats = self.stats
        stats.extents += n
        stats.reads += n
        stats.bytes_read += n * reads.read_bytes
        pending = PendingRead(started=started, batch=reads)

        def count() -> None:
            stats.busy_s += pending.finished[-1] - pending.started

        pending.on_done = count
        self._last = pending
        return pending

    def read(self, file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
             dest: np.ndarray | list[np.ndarray], buffers: np.ndarray | None = None) -> float:
        """Blocking `submit`; returns the wall time."""
        return self.submit(file_offsets, lengths, dest_offsets, dest, buffers).wait()

    def close(self) -> None:
        if self.fd >= 0:
            if self._last is not None and not self._last.collected:
                try:
                    self._last.wait()
                except OSError:  # nobody asked for this batch any more
                    pass
            self.pool.shutdown()
            if self.aio is not None:
                self.aio.close()
            if self.ring is not None:
                self.ring.close()
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
                f"engine={self.engine} depth={self.depth}>")

