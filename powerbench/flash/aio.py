"""Linux native asynchronous I/O (io_setup / io_submit / io_getevents) through ctypes.

A batch of reads is one `io_submit` system call, however many reads it holds, and one
`io_getevents` to collect them: the device sees the whole batch at once (queue depth =
batch size, up to `depth`) and no Python thread wakes per read, which matters on a
machine with few cores (the thread-pool reader pays a GIL hand-off per read). With
`O_DIRECT` on ext4/xfs the reads are truly asynchronous; the caller computes meanwhile.

Only the raw system calls are used (no libaio): the `iocb` and `io_event` layouts are the
kernel's UAPI (little-endian 64-bit). `available()` says whether this machine allows it
(architecture known, not blocked by seccomp).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from powerbench.flash.read_plan import ReadPlan

# syscall numbers: io_setup, io_destroy, io_getevents, io_submit
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
IOCB_CMD_PREAD = 0
IOCB_CMD_PREADV = 7

IOCB = np.dtype([("data", "<u8"), ("key", "<u4"), ("rw_flags", "<u4"), ("opcode", "<u2"),
                 ("reqprio", "<i2"), ("fildes", "<u4"), ("buf", "<u8"), ("nbytes", "<u8"),
                 ("offset", "<i8"), ("reserved2", "<u8"), ("flags", "<u4"), ("resfd", "<u4")])
EVENT = np.dtype([("data", "<u8"), ("obj", "<u8"), ("res", "<i8"), ("res2", "<i8")])
assert IOCB.itemsize == 64 and EVENT.itemsize == 32

_libc: ctypes.CDLL | None = None
REAP_SPIN_NS = 5_000_000  # a waiter looks for completions this long, then sleeps for them


def _syscall(n: int, *args: object) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)  # releases the GIL during the call
        _libc.syscall.restype = ctypes.c_long
    return _libc.syscall(ctypes.c_long(n), *args)


def _numbers() -> tuple[int, int, int, int] | None:
    if platform.system() != "Linux" or np.little_endian is False:
        return None
    return _SYSCALLS.get(platform.machine())


def available() -> bool:
    """Native AIO works here (one context is opened and closed to find out)."""
    try:
        ctx = AioContext(1)
    except OSError:
        return False
    ctx.close()
    return True


def finish_short_read(fd: int, iov: list[tuple[int, int]], pos: int, done: int) -> None:
    """Complete a vectored read of `iov` ((address, bytes) pieces) from file offset `pos`
    of which the kernel delivered only the first `done` bytes: the rest with `preadv`; a
    read past the end of the file (a truncated weight file) raises."""
    for addr, n in iov:
        if done >= n:
            done, pos = done - n, pos + n
            continue
        addr, n, pos, done = addr + done, n - done, pos + done, 0
        while n > 0:
            view = (ctypes.c_char * n).from_address(addr)
            got = os.preadv(fd, [memoryview(view).cast("B")], pos)
            if got <= 0:
                raise OSError(errno.EIO, f"read past the end at byte {pos} (truncated file?)")
            addr, n, pos = addr + got, n - got, pos + got


@dataclass
class AioBatch:
    """Reads submitted together. Keeps the iocbs and iovecs alive until collected."""

    ctx: AioContext
    iocbs: np.ndarray
    expected: np.ndarray  # bytes per read
    iov: np.ndarray  # [pieces, 2] (address, length)
    first: np.ndarray  # per read: its first iovec
    count: np.ndarray  # per read: its number of iovecs
    fd: int
    submitted: int = 0
    done: int = 0

    def start(self) -> None:
        """The first `io_submit` (up to the context's depth)."""
        self._submit_more()

    @property
    def finished(self) -> bool:
        return self.done == len(self.iocbs)

    def _submit_more(self) -> None:
        n = min(len(self.iocbs) - self.submitted, self.ctx.depth - (self.submitted - self.done))
        if n <= 0:
            return
        base = self.iocbs.ctypes.data + self.submitted * IOCB.itemsize
        ptrs = base + np.arange(n, dtype=np.uint64) * IOCB.itemsize
        got = _syscall(self.ctx.nr_submit, ctypes.c_ulong(self.ctx.handle), ctypes.c_long(n),
                       ctypes.c_void_p(ptrs.ctypes.data))
        if got < 0:
            err = ctypes.get_errno()
            if err == errno.EAGAIN and self.submitted > self.done:
                return  # the queue is full: more after the next completions
            raise OSError(err, f"io_submit: {os.strerror(err)}")
        self.submitted += got

    def wait(self) -> None:
        """Block until every read landed (short reads finished synchronously). Once the
        whole batch is submitted, one `io_getevents` waits for all of it; completions are
        checked as arrays (no Python per read unless one came back short)."""
        while not self.finished:
            self._submit_more()
            inflight = self.submitted - self.done
            events = self.ctx.events
            everything = self.submitted == len(self.iocbs)
            got = _syscall(self.ctx.nr_getevents, ctypes.c_ulong(self.ctx.handle),
                           ctypes.c_long(inflight if everything else 1),
                           ctypes.c_long(min(inflight, len(events))),
                           ctypes.c_void_p(events.ctypes.data), None)
            if got < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                raise OSError(err, f"io_getevents: {os.strerror(err)}")
            data, res = events["data"][:got].astype(np.int64), events["res"][:got]
            if (res < 0).any():
                bad = int(res[res < 0][0])
                raise OSError(-bad, f"asynchronous read failed: {os.strerror(-bad)}")
            short = np.flatnonzero(res != self.expected[data])
            for k in short.tolist():
                self._finish_short(int(data[k]), int(res[k]))
            self.done += got

    def _finish_short(self, i: int, done: int) -> None:
        a, k = int(self.first[i]), int(self.count[i])
        finish_short_read(self.fd, self.iov[a:a + k].tolist(), int(self.iocbs["offset"][i]),
                          done)


class AioContext:
    """One kernel AIO context allowing `depth` reads in flight."""

    def __init__(self, depth: int = 128) -> None:
        numbers = _numbers()
        if numbers is None:
            raise OSError(errno.ENOSYS, f"native AIO: no syscall numbers for "
                          f"{platform.system()} {platform.machine()}")
        self.nr_setup, self.nr_destroy, self.nr_getevents, self.nr_submit = numbers
        self.depth = max(int(depth), 1)
        handle = ctypes.c_ulong(0)
        if _syscall(self.nr_setup, ctypes.c_long(self.depth), ctypes.byref(handle)) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"io_setup: {os.strerror(err)}")
        self.handle = handle.value
        self.events = np.zeros(self.depth, dtype=EVENT)

    def submit_plan(self, fd: int, plan: ReadPlan, bases: np.ndarray,
                    start: bool = True) -> AioBatch:
        """Prepare the plan's reads (vectorised: no Python per read) and, with `start`,
        submit them (else call `batch.start()`, e.g. from another thread). `bases[b]`:
        address of buffer b. One piece: PREAD; several: PREADV over one iovec array."""
        n = plan.n_reads
        iov = np.empty((plan.piece_len.size, 2), dtype=np.uint64)  # struct iovec {base, len}
        iov[:, 0] = bases[plan.piece_buf] + plan.piece_dest.astype(np.uint64)
        iov[:, 1] = plan.piece_len
        single = plan.op_pieces == 1
        cbs = np.zeros(n, dtype=IOCB)
        cbs["data"] = np.arange(n)
        cbs["fildes"] = fd
        cbs["offset"] = plan.op_offset
        cbs["opcode"] = np.where(single, IOCB_CMD_PREAD, IOCB_CMD_PREADV)
        first = plan.op_first
        cbs["buf"] = np.where(single, iov[first, 0],
                              iov.ctypes.data + first.astype(np.uint64) * 16)
        cbs["nbytes"] = np.where(single, iov[first, 1], plan.op_pieces.astype(np.uint64))
        batch = AioBatch(self, cbs, plan.op_bytes, iov, plan.op_first, plan.op_pieces, fd)
        if start:
            batch.start()
        return batch

    def close(self) -> None:
        if self.handle:
            _syscall(self.nr_destroy, ctypes.c_ulong(self.handle))
            self.handle = 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class ScatterReads:
    """Reads of one fixed shape through preallocated iocbs: read j is `n_pieces` pieces of
    `piece_bytes` back to back in the file, piece p landing in buffer `piece_buf[p]`
    (a bundled cluster: its neurons' part rows, each into its part's arena). Per batch
    only the file offsets and the destination addresses are written (two array
    operations), then one `io_submit`; `wait` is one `io_getevents` for the whole batch.
    One batch in flight at a time, of at most `ctx.depth` reads."""

    def __init__(self, ctx: AioContext, fd: int, n_pieces: int, piece_bytes: int,
                 piece_buf: np.ndarray, bases: np.ndarray) -> None:
        n = ctx.depth
        self.ctx, self.fd, self.n_pieces = ctx, fd, n_pieces
        self.read_bytes = n_pieces * piece_bytes
        # iovecs [read, piece, (address, length)]: lengths constant
        self.iov = np.zeros((n, n_pieces, 2), dtype=np.uint64)
        self.iov[:, :, 1] = piece_bytes
        self.piece_base = np.asarray(bases, dtype=np.int64)[np.asarray(piece_buf)]
        self.iov_addr = self.iov.view(np.int64)[:, :, 0]
        self.cbs = np.zeros(n, dtype=IOCB)
        self.cbs["data"] = np.arange(n)
        self.cbs["fildes"] = fd
        self.cbs["opcode"] = IOCB_CMD_PREADV
        self.cbs["buf"] = self.iov.ctypes.data + np.arange(n, dtype=np.uint64) * (n_pieces * 16)
        self.cbs["nbytes"] = n_pieces
        self.offset = self.cbs["offset"]  # a view: written per batch
        self.ptrs = self.cbs.ctypes.data + np.arange(n, dtype=np.uint64) * IOCB.itemsize
        self._ptrs = ctypes.c_void_p(self.ptrs.ctypes.data)
        self._events = ctypes.c_void_p(ctx.events.ctypes.data)
        self._handle = ctypes.c_ulong(ctx.handle)
        self.pending = 0
        from powerbench.flash.plan import load  # compiled: completions reaped in user space

        lib = load()
        self._reap = None if lib is None else lib.pb_aio_reap

    @property
    def finished(self) -> bool:
        return self.pending == 0

    def submit(self, file_offsets: np.ndarray, dest_offsets: np.ndarray) -> None:
        """Start reads j = 0..n-1 at `file_offsets[j]`, piece p of read j landing at byte
        `dest_offsets[j, p]` of its buffer."""
        n = int(file_offsets.size)
        if n > self.ctx.depth:
            raise ValueError(f"{n} reads > the AIO context's depth {self.ctx.depth}")
        if self.pending:
            raise RuntimeError("the previous ScatterReads batch was not collected")
        self.offset[:n] = file_offsets
        np.add(self.piece_base, dest_offsets, out=self.iov_addr[:n])
        done = 0
        while done < n:
            got = _syscall(self.ctx.nr_submit, self._handle, ctypes.c_long(n - done),
                           ctypes.c_void_p(self.ptrs.ctypes.data + done * 8))
            if got < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                self.pending = done
                self.wait()
                raise OSError(err, f"io_submit: {os.strerror(err)}")
            done += got
        self.pending = n

    def wait(self) -> None:
        """Block until the batch landed; a short read is finished synchronously."""
        events = self.ctx.events
        if self._reap is not None and self.pending:  # compiled: see pb_aio_reap
            n, self.pending = self.pending, 0
            got = self._reap(self.ctx.handle, self.ctx.nr_getevents, n, events.ctypes.data,
                             self.read_bytes, REAP_SPIN_NS)
            if got < 0:
                raise OSError(-got, f"io_getevents: {os.strerror(-got)}")
            if got:
                self._check(events[:n].copy())
        while self.pending:
            got = _syscall(self.ctx.nr_getevents, self._handle, ctypes.c_long(self.pending),
                           ctypes.c_long(self.pending), self._events, None)
            if got < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                raise OSError(err, f"io_getevents: {os.strerror(err)}")
            self.pending -= got
            res = events["res"][:got]
            if (res != self.read_bytes).any():
                self._check(events[:got].copy())

    def _check(self, events: np.ndarray) -> None:
        for ev in events:
            i, res = int(ev["data"]), int(ev["res"])
            if res < 0:
                self.pending = 0  # the rest is abandoned with the error
                raise OSError(-res, f"asynchronous read failed: {os.strerror(-res)}")
            finish_short_read(self.fd, self.iov[i].tolist(), int(self.offset[i]), res)


def batch_read_bandwidth(fd: int, file_bytes: int, block: int, batch: int,
                         seconds: float = 0.3, seed: int = 0) -> float:
    """Bytes/s of random `block`-aligned reads over the first `file_bytes` of `fd` (opened
    with O_DIRECT), issued as the flash engine issues a layer's misses: `batch` reads in
    one `io_submit`, then one wait for all of them, repeated for about `seconds`. No
    Python per read, so on a machine with few busy cores it measures the device (and the
    kernel's per-read work) rather than reader threads."""
    import mmap
    import time

    slots = file_bytes // block
    if slots < batch:
        raise ValueError(f"a file of {file_bytes} B holds fewer than {batch} blocks of {block}")
    ctx = AioContext(batch)
    buf = np.frombuffer(mmap.mmap(-1, batch * block), dtype=np.uint8)
    try:
        reads = ScatterReads(ctx, fd, 1, block, np.zeros(1, dtype=np.int64),
                             np.array([buf.ctypes.data], dtype=np.int64))
        dest = (np.arange(batch, dtype=np.int64) * block)[:, None]
        rng = np.random.default_rng(seed)
        n, t0 = 0, time.perf_counter()
        while True:
            reads.submit(rng.choice(slots, size=batch, replace=False) * block, dest)
            reads.wait()
            n += batch
            wall = time.perf_counter() - t0
            if wall >= seconds:
                return n * block / wall
    finally:
        ctx.close()


def batch_curve(path: str | os.PathLike, block: int, depth: int = 128,
                seconds: float = 0.3, batches: tuple[int, ...] = ()
                ) -> tuple[tuple[int, float], ...]:
    """((batch, bytes/s), ...): `batch_read_bandwidth` of random `block` reads over the
    whole of `path` (e.g. the flash weight file itself: the span the engine reads) with
    O_DIRECT, at batches 1, 2, 4 ... `depth` and `batches` (e.g. the engine's own batch
    sizes, so that its ceiling is measured rather than interpolated), ascending; empty
    where O_DIRECT or AIO is unavailable."""
    from powerbench.hardware.storage import open_direct

    fd, direct = open_direct(str(path), True)
    try:
        if not direct:
            return ()
        size = os.path.getsize(path)
        sizes = sorted({2 ** k for k in range(int(np.log2(depth)) + 1)}
                       | {int(b) for b in batches if 1 <= b <= depth})
        out = []
        for b in sizes:
            if b > size // block:
                break
            try:
                out.append((b, batch_read_bandwidth(fd, size, block, b, seconds)))
            except OSError:
                return ()
        return tuple(out)
    finally:
        os.close(fd)
