"""Reads from the weight file that bypass the page cache, batched and asynchronous.

`DirectReader` opens the file with `O_DIRECT`, so every read goes to the storage device
(what a phone's UFS read costs, not a DRAM copy out of the page cache). `O_DIRECT` needs
the buffer address, the file offset and the length aligned to the logical block size:
buffers come from `aligned_buffer` (an anonymous mmap, page aligned) and the layout
aligns every extent to 4096 bytes. Where the file system refuses `O_DIRECT` (EINVAL at
open or on the first read) the reader falls back to buffered reads with one warning and
`direct` False.

A batch of extents is sorted by file offset; extents that are adjacent in the file are
coalesced into one read (a scatter `preadv` into their places, which may lie in several
buffers, up to `max_read_bytes` and `IOV_MAX` pieces). Two engines issue the reads:

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
import mmap
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from powerbench.flash.aio import AioBatch, AioContext, ScatterReads
from powerbench.flash.uring import Ring, UringScatter
from powerbench.hardware.storage import open_direct

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
    """One system call: `pieces` = (buffer, dest_offset, length) placed back to back in
    the file from `file_offset` on (a scatter read into one or several buffers)."""

    file_offset: int
    pieces: tuple[tuple[int, int, int], ...]

    @property
    def nbytes(self) -> int:
        return sum(n for _, _, n in self.pieces)


@dataclass(frozen=True)
class ReadPlan:
    """A batch of extents grouped into reads (numpy arrays, no per-read Python objects).

    Read j starts at file offset `op_offset[j]`, is `op_bytes[j]` long and fills pieces
    `op_first[j] .. op_first[j] + op_pieces[j] - 1`; piece i is `piece_len[i]` bytes into
    buffer `piece_buf[i]` at `piece_dest[i]`."""

    op_offset: np.ndarray
    op_bytes: np.ndarray
    op_first: np.ndarray
    op_pieces: np.ndarray
    piece_buf: np.ndarray
    piece_dest: np.ndarray
    piece_len: np.ndarray

    @property
    def n_reads(self) -> int:
        return int(self.op_offset.size)

    def ops(self) -> list[ReadOp]:
        out = []
        bufs, dests, lens = (a.tolist() for a in (self.piece_buf, self.piece_dest,
                                                   self.piece_len))
        for off, first, k in zip(self.op_offset.tolist(), self.op_first.tolist(),
                                 self.op_pieces.tolist(), strict=True):
            out.append(ReadOp(off, tuple(zip(bufs[first:first + k], dests[first:first + k],
                                             lens[first:first + k], strict=True))))
        return out


def plan_reads(file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
               max_read_bytes: int = 1 << 20, buffers: np.ndarray | None = None) -> ReadPlan:
    """Group extents adjacent in the file into reads: a run of neighbours is cut every
    `max_read_bytes` (an extent belongs to the read its first byte falls in), and at most
    `IOV_MAX` pieces per read. Extent i goes to buffer `buffers[i]` (default 0) at
    `dest_offsets[i]`; neighbours contiguous in the same buffer become one piece."""
    order = np.argsort(file_offsets, kind="stable")
    off = np.asarray(file_offsets, dtype=np.int64)[order]
    ln = np.asarray(lengths, dtype=np.int64)[order]
    dest = np.asarray(dest_offsets, dtype=np.int64)[order]
    buf = (np.zeros(off.size, dtype=np.int64) if buffers is None
           else np.asarray(buffers, dtype=np.int64)[order])
    n = off.size
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return ReadPlan(e, e, e, e, e, e, e)
    cap = max(min(int(max_read_bytes), IOV_MAX * int(ln.min())), 1)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = off[1:] != off[:-1] + ln[:-1]
    run_start = off[new_run][np.cumsum(new_run) - 1]
    chunk = (off - run_start) // cap
    new_op = new_run.copy()
    new_op[1:] |= chunk[1:] != chunk[:-1]
    merge = np.zeros(n, dtype=bool)
    merge[1:] = ~new_op[1:] & (buf[1:] == buf[:-1]) & (dest[1:] == dest[:-1] + ln[:-1])
    starts = np.flatnonzero(~merge)
    piece_of = np.cumsum(~merge) - 1
    op_starts = np.flatnonzero(new_op)
    op_first = piece_of[op_starts]
    return ReadPlan(
        op_offset=off[op_starts], op_bytes=np.add.reduceat(ln, op_starts), op_first=op_first,
        op_pieces=np.diff(np.append(op_first, starts.size)), piece_buf=buf[starts],
        piece_dest=dest[starts], piece_len=np.add.reduceat(ln, starts))


def coalesce(file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
             max_read_bytes: int = 1 << 20, buffers: np.ndarray | None = None) -> list[ReadOp]:
    """`plan_reads` as a list of `ReadOp`s."""
    return plan_reads(file_offsets, lengths, dest_offsets, max_read_bytes, buffers).ops()


@dataclass
class ReaderStats:
    bytes_read: int = 0
    reads: int = 0  # system calls
    extents: int = 0  # extents asked for (before coalescing)
    busy_s: float = 0.0  # summed time inside preadv over all workers

    def reset(self) -> None:
        self.bytes_read = self.reads = self.extents = 0
        self.busy_s = 0.0


class Task:
    """A job handed to a `Workers` thread; `result()` blocks until it ran (re-raising)."""

    __slots__ = ("fn", "args", "_done", "_outcome")

    def __init__(self, fn: Callable[..., object], args: tuple) -> None:
        self.fn, self.args = fn, args
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._outcome: tuple[bool, object] | None = None

    def run(self) -> None:
        try:
            self._done.put((True, self.fn(*self.args)))
        except BaseException as err:  # handed to the waiter
            self._done.put((False, err))

    def result(self) -> object:
        if self._outcome is None:
            self._outcome = self._done.get()
        ok, value = self._outcome
        if not ok:
            raise value  # type: ignore[misc]
        return value


class Workers:
    """Daemon threads taking `Task`s from one C-level `SimpleQueue`: a hand-off costs a
    few microseconds (`ThreadPoolExecutor.submit` costs ~100 us under CPU contention, in
    its Python-level idle semaphore)."""

    def __init__(self, n: int, name: str = "flash-io") -> None:
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def _loop(self) -> None:
        while True:
            task = self.q.get()
            if task is None:
                return
            task.run()

    def submit(self, fn: Callable[..., object], *args: object) -> Task:
        task = Task(fn, args)
        self.q.put(task)
        return task

    def shutdown(self) -> None:
        for _ in self.threads:
            self.q.put(None)
        for t in self.threads:
            t.join()


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

