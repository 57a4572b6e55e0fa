"""How much of a file (or of everything) the kernel's page cache holds; dropping a file
from it. The flash benchmarks check with these that O_DIRECT reads bypass it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def cached_bytes() -> int:
    """/proc/meminfo Cached (page cache) in bytes; 0 off Linux."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("Cached:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def page_cache_bytes(path: str | os.PathLike) -> int | None:
    """Bytes of `path` resident in the page cache (mincore over a private mapping, which
    reads nothing); None where mincore is unavailable. Unlike /proc/meminfo Cached this
    is immune to other processes' file activity."""
    import ctypes
    import mmap

    try:
        size = os.path.getsize(path)
        if size == 0:
            return 0
        libc = ctypes.CDLL(None, use_errno=True)
        page = mmap.PAGESIZE
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            anchor = ctypes.c_char.from_buffer(mm)
            vec = (ctypes.c_ubyte * (-(-size // page)))()
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size),
                              vec)
            del anchor
        finally:
            mm.close()
        if rc != 0:
            return None
        return int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1)) * page
    except (OSError, AttributeError, ValueError):
        return None


def drop_page_cache(path: str | os.PathLike) -> None:
    """Ask the kernel to drop `path`'s clean pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
