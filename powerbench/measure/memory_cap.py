"""A memory cap for one process tree: a cgroup v1 memory controller group.

`MemoryCap(name, limit_bytes)` creates `/sys/fs/cgroup/memory/<name>` with
`memory.limit_in_bytes` = the limit (anonymous memory AND the page cache the group's
processes fault in count against it: under the limit the kernel reclaims the group's
page cache, and kills it when anonymous memory alone would exceed it). A process joins it
with `join()` (run as `preexec_fn` in a child before it starts, so all its memory is
charged there). `stats()` reads the group's peak usage, failure count (allocations
that had to reclaim) and OOM kills; `close()` empties and removes the group. Needs root
and the v1 memory controller mounted; `MemoryCapUnavailable` says which is missing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/memory")


class MemoryCapUnavailable(RuntimeError):
    """No cgroup v1 memory controller can be used here (the message says why)."""


@dataclass(frozen=True)
class CapStats:
    limit_bytes: int
    max_usage_bytes: int
    failcnt: int
    oom_kills: int


class MemoryCap:
    def __init__(self, name: str, limit_bytes: int, root: Path = ROOT) -> None:
        if not (root / "memory.limit_in_bytes").exists():
            raise MemoryCapUnavailable(f"no cgroup v1 memory controller at {root} (mount it, "
                                       "or run without a memory cap)")
        if os.geteuid() != 0:
            raise MemoryCapUnavailable("a memory cgroup needs root")
        if limit_bytes < 64 << 20:
            raise ValueError(f"memory cap {limit_bytes} bytes: at least 64 MiB")
        self.path = root / name
        self.path.mkdir(exist_ok=True)
        self._write("memory.limit_in_bytes", limit_bytes)
        self.limit_bytes = int(self._read("memory.limit_in_bytes"))
        self._write("memory.max_usage_in_bytes", 0)

    def _write(self, name: str, value: int | str) -> None:
        (self.path / name).write_text(str(value))

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def join(self, pid: int | None = None) -> None:
        """Move `pid` (default: the calling process) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid if pid is not None else os.getpid()))

    def usage(self) -> int:
        return int(self._read("memory.usage_in_bytes"))

    def stats(self) -> CapStats:
        oom = 0
        for line in self._read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                oom = int(line.split()[1])
        return CapStats(self.limit_bytes, int(self._read("memory.max_usage_in_bytes")),
                        int(self._read("memory.failcnt")), oom)

    def reset_peak(self) -> None:
        self._write("memory.max_usage_in_bytes", 0)
        self._write("memory.failcnt", 0)

    def close(self) -> None:
        """Empty the group (its page cache is dropped or moved up) and remove it."""
        if not self.path.exists():
            return
        for _ in range(50):  # processes that just exited leave the group asynchronously
            if not self._read("cgroup.procs").strip():
                break
            time.sleep(0.1)
        try:
            self._write("memory.force_empty", 0)
        except OSError:
            pass
        try:
            self.path.rmdir()
        except OSError:
            pass

    def __enter__(self) -> MemoryCap:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
