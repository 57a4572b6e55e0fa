"""Storage microbenchmark: random reads that bypass the page cache.

`measure_storage(directory)` writes a scratch file of `file_mb` MB there (random bytes,
fsynced, its pages dropped), then issues random block-aligned reads of each block size
(4 KB and 512 KB by default) with `O_DIRECT`, from 1 thread (queue depth 1) and from
several threads (queue depth = threads), for about `seconds` each, and deletes the file.
Where `O_DIRECT` is refused it reads buffered after `POSIX_FADV_DONTNEED` and says so
(`direct` False): those numbers may include page-cache hits.

PowerInfer-2 characterises a phone's UFS the same way (its paper: 4 KB random
~1 GB/s, 512 KB random 3.5 GB/s); the `local` profile records the result as a storage
tier (`powerbench.hardware.local`). Needs numpy and the standard library only.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

KB = 1024
BLOCK = 4096


@dataclass(frozen=True)
class StorageResult:
    """One (block size, queue depth) point."""

    block_bytes: int
    queue_depth: int  # threads issuing reads at once, one outstanding read each
    bandwidth: float  # bytes/s over all threads
    latency_s: float  # mean time of one read
    reads: int


@dataclass(frozen=True)
class StorageProfile:
    path: str  # directory measured
    direct: bool  # O_DIRECT was in effect
    file_bytes: int
    results: tuple[StorageResult, ...] = field(default_factory=tuple)
    rotational: bool | None = None

    def result(self, block_bytes: int, queue_depth: int) -> StorageResult:
        for r in self.results:
            if (r.block_bytes, r.queue_depth) == (block_bytes, queue_depth):
                return r
        raise KeyError(f"no result for {block_bytes} B at queue depth {queue_depth}")

    def best_bandwidth(self, block_bytes: int) -> float:
        """Highest bandwidth over the queue depths measured at this block size."""
        rates = [r.bandwidth for r in self.results if r.block_bytes == block_bytes]
        if not rates:
            raise KeyError(f"no result for {block_bytes} B blocks")
        return max(rates)

    @property
    def random_read_bw(self) -> float:
        """Best random-read bandwidth measured (any block size and queue depth)."""
        return max(r.bandwidth for r in self.results)

    def figures(self) -> dict[str, float]:
        """Flat numbers (GB/s, microseconds) for a MemoryTier's `extra`."""
        out: dict[str, float] = {}
        for r in self.results:
            size = f"{r.block_bytes // KB}k"
            out[f"rand_read_{size}_qd{r.queue_depth}_gb_s"] = r.bandwidth / 1e9
            out[f"rand_read_{size}_qd{r.queue_depth}_lat_us"] = r.latency_s * 1e6
        out["direct_io"] = float(self.direct)
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def _aligned(nbytes: int) -> memoryview:
    return memoryview(mmap.mmap(-1, max(-(-nbytes // BLOCK) * BLOCK, BLOCK)))[:nbytes]


def _write_scratch(path: Path, nbytes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    chunk = 16 << 20
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            n = min(chunk, left)
            f.write(rng.bytes(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def open_direct(path: str | os.PathLike, direct: bool = True,
                opener=os.open) -> tuple[int, bool]:
    """A read-only fd for random reads and whether O_DIRECT is in effect: O_DIRECT when
    asked for and the file system takes it (probed with one aligned read), else the page
    cache with its pages dropped and read-ahead off."""
    flag = getattr(os, "O_DIRECT", 0)
    if direct and flag:
        try:
            fd = opener(str(path), os.O_RDONLY | flag)
            try:
                os.preadv(fd, [_aligned(BLOCK)], 0)
                return fd, True
            except OSError:
                os.close(fd)
                raise
        except OSError as err:
            if err.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    fd = opener(str(path), os.O_RDONLY)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    return fd, False


def random_reads(fd: int, file_bytes: int, block: int, threads: int, seconds: float,
                 seed: int = 0, max_reads: int | None = None) -> StorageResult:
    """Random `block`-aligned reads from `threads` threads for about `seconds`."""
    slots = file_bytes // block
    if slots < 1:
        raise ValueError(f"file of {file_bytes} B holds no {block} B block")
    counts = [0] * threads
    busy = [0.0] * threads
    deadline = time.perf_counter() + seconds
    start = threading.Barrier(threads + 1)

    def worker(i: int) -> None:
        rng = np.random.default_rng(seed + i)
        buf = _aligned(block)
        offsets = rng.integers(0, slots, size=4096) * block
        start.wait()
        n, t_busy = 0, 0.0
        while True:
            t0 = time.perf_counter()
            if os.preadv(fd, [buf], int(offsets[n % offsets.size])) != block:
                raise OSError(errno.EIO, "short read in the storage benchmark")
            t1 = time.perf_counter()
            t_busy += t1 - t0
            n += 1
            if t1 >= deadline or (max_reads is not None and n >= max_reads):
                break
        counts[i], busy[i] = n, t_busy

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    wall = max(time.perf_counter() - t0, 1e-9)
    total = sum(counts)
    return StorageResult(block_bytes=block, queue_depth=threads, bandwidth=total * block / wall,
                         latency_s=sum(busy) / max(total, 1), reads=total)


def _rotational(path: Path) -> bool | None:
    """Whether the block device under `path` spins (Linux sysfs; None: unknown)."""
    try:
        dev = os.stat(path).st_dev
        sys_dir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
        for candidate in (sys_dir / "queue" / "rotational",
                          sys_dir.resolve().parent / "queue" / "rotational"):
            if candidate.exists():
                return candidate.read_text().strip() == "1"
    except OSError:
        pass
    return None


def measure_storage(directory: str | os.PathLike, file_mb: int = 256,
                    blocks_kb: tuple[int, ...] = (4, 512), queue_depths: tuple[int, ...] = (1, 4),
                    seconds: float = 0.25, direct: bool = True, seed: int = 0) -> StorageProfile:
    """Random-read bandwidth and latency of the storage holding `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    nbytes = max(int(file_mb * 1e6) // (512 * KB), 1) * 512 * KB
    path = directory / f".storage-bench-{os.getpid()}.bin"
    try:
        _write_scratch(path, nbytes, seed)
        fd, is_direct = open_direct(path, direct)
        try:
            results = tuple(random_reads(fd, nbytes, kb * KB, qd, seconds, seed)
                            for kb in blocks_kb for qd in queue_depths)
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)
    return StorageProfile(path=str(directory), direct=is_direct, file_bytes=nbytes,
                          results=results, rotational=_rotational(directory))
