"""What a process holds and reads: peak resident memory, the guard on it, storage reads.

`peak_rss()` is the kernel's high-water mark of resident memory (`VmHWM`, /proc/self/status);
`reset_peak_rss()` restarts it (writing 5 to /proc/self/clear_refs), so each run of
a process that runs several reports its own peak. `ResidentBudget` is the guard: a run
may hold at most the process's own baseline (interpreter, torch, kernels: measured before
any weight is loaded) + the dense weights in DRAM + the FFN cache's budget + one layer of
scratch slots + `slack_bytes` (activations, KV cache, allocator); `check(peak)` raises
`ResidentMemoryExceeded` with every term when the peak is above it.

`read_bytes(pid)` is the kernel's count of bytes a process caused to be read from storage
(/proc/<pid>/io `read_bytes`: page-cache misses and O_DIRECT reads; hits are not in it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GB = 1e9


class ResidentMemoryExceeded(RuntimeError):
    """A run's peak resident memory went above its budget (the message has the terms)."""


def _status_kb(field: str, pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/{pid}/status has no {field}")


def rss() -> int:
    """This process's resident memory now (bytes)."""
    return _status_kb("VmRSS") * 1024


def peak_rss() -> int:
    """This process's peak resident memory since start or the last `reset_peak_rss`."""
    return _status_kb("VmHWM") * 1024


def reset_peak_rss() -> bool:
    """Restart the peak (`VmHWM`) at the current RSS; False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def read_bytes(pid: int | str = "self") -> int:
    """Bytes `pid` caused to be read from storage so far (/proc/<pid>/io read_bytes)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise OSError(f"/proc/{pid}/io has no read_bytes")


@dataclass(frozen=True)
class ResidentBudget:
    """The most a run may hold resident (bytes): see the module docstring."""

    baseline_bytes: int  # the process before any weight (interpreter, torch, kernels)
    dense_bytes: int  # attention, norms, embeddings, LM head, predictors
    cache_bytes: int  # the FFN cache's budget
    scratch_bytes: int  # one layer of uncached reads
    slack_bytes: int  # activations, KV cache, allocator

    @property
    def limit_bytes(self) -> int:
        return (self.baseline_bytes + self.dense_bytes + self.cache_bytes
                + self.scratch_bytes + self.slack_bytes)

    def describe(self) -> str:
        return (f"{self.limit_bytes / GB:.2f} GB = baseline {self.baseline_bytes / GB:.2f} + "
                f"dense {self.dense_bytes / GB:.2f} + FFN cache {self.cache_bytes / GB:.2f} + "
                f"scratch {self.scratch_bytes / GB:.2f} + slack {self.slack_bytes / GB:.2f}")

    def check(self, peak_bytes: int) -> None:
        if peak_bytes > self.limit_bytes:
            raise ResidentMemoryExceeded(
                f"peak resident memory {peak_bytes / GB:.2f} GB exceeds the budget "
                f"{self.describe()} GB (over by {(peak_bytes - self.limit_bytes) / GB:.2f} GB)")


def tensor_bytes(obj: object, seen: set[int] | None = None) -> int:
    """Bytes of the distinct tensor storages reachable from `obj`'s dataclass fields,
    lists and tuples (shared storages, e.g. a tied embedding, counted once)."""
    import dataclasses

    import torch

    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = obj.untyped_storage().data_ptr()
        if key in seen:
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(tensor_bytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x, seen) for x in obj)
    return 0


def memory_available() -> int:
    """/proc/meminfo MemAvailable (bytes): what the machine could give without swapping."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0
