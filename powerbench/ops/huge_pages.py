"""Weights on transparent huge pages (2 MiB), asked for explicitly per tensor.

A sparse operator reads scattered weight rows; on 4 KiB pages every row of a few KiB is a
fresh TLB entry (a page walk per row), on 2 MiB pages hundreds of rows share one. Linux
backs an anonymous range with huge pages when it is advised ``MADV_HUGEPAGE`` (THP mode
``madvise``) and ``MADV_COLLAPSE`` (Linux >= 6.1) collapses the pages already there now,
in place: same addresses, same contents, no copy the caller can see.

`use_huge_pages(t)` does both on the 2 MiB-aligned part of a CPU tensor's storage (aligned
inward: the partial huge pages at either end stay on small pages) and reports, in a
`HugePages`, how many bytes of the storage are on huge pages afterwards (the
``AnonHugePages`` of /proc/self/smaps over that range), or why it did nothing: not Linux,
THP ``never``, not on the CPU, smaller than one huge page. A 2 MiB block that a mapping
boundary crosses (a heap allocation can straddle two mappings) stays on small pages though
both advices succeed: the count shows it, the reason says how much. Memory mapped from a
file (a checkpoint that transformers loads with mmap, e.g. safetensors) is refused (EINVAL):
the reason names the file, and a copy of the tensor is anonymous memory. The count is of its
moment: Linux >= 6.12 may later split a huge page whose 4 KiB pages are all zero when
memory runs short (the underused-THP shrinker); weights are not zero, an all-zeros tensor
can be.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

HUGE_PAGE = 2 << 20  # bytes (x86-64 and arm64 with 4 KiB base pages)
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
SMAPS = Path("/proc/self/smaps")
MAPS = Path("/proc/self/maps")
TOO_SMALL = "smaller than one 2 MiB-aligned huge page"


@dataclass(frozen=True)
class HugePages:
    """What `use_huge_pages` did to one storage: its size, the bytes on huge pages after
    the call, and a reason when it did not (fully) succeed ("" when it did)."""

    nbytes: int
    huge_bytes: int = 0
    reason: str = ""

    @property
    def fraction(self) -> float:
        return self.huge_bytes / self.nbytes if self.nbytes else 0.0


def thp_mode() -> str:
    """The system's THP mode (always | madvise | never), "" where there is none (not Linux)."""
    try:
        text = THP_ENABLED.read_text()
    except OSError:
        return ""
    return text[text.find("[") + 1: text.find("]")] if "[" in text else text.strip()


def aligned_range(address: int, nbytes: int, align: int = HUGE_PAGE) -> tuple[int, int]:
    """The largest [start, end) inside [address, address + nbytes) on `align` boundaries
    (empty, start == end, where none fits)."""
    start = -(-address // align) * align
    end = max(start, (address + nbytes) // align * align)
    return start, end


def huge_bytes_in(start: int, end: int, smaps: Path = SMAPS) -> int:
    """Bytes of [start, end) on anonymous huge pages: per mapping, its ``AnonHugePages``,
    at most its overlap with the range (exact when the range covers whole mappings, as
    after ``MADV_HUGEPAGE`` on it, which splits the mapping at its ends)."""
    total = 0
    overlap = 0
    try:
        lines = smaps.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:  # a mapping's header: "lo-hi perms ..."
            lo, hi = (int(v, 16) for v in head.split("-"))
            overlap = max(0, min(hi, end) - max(lo, start))
        elif overlap and line.startswith("AnonHugePages:"):
            total += min(overlap, int(line.split()[1]) * 1024)
    return total


def mapped_file(address: int, maps: Path = MAPS) -> str:
    """The file that the mapping holding `address` maps ("" for anonymous memory, or when
    /proc/self/maps cannot be read)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if lo <= address < hi:
            path = fields[5] if len(fields) > 5 else ""
            return path if path.startswith("/") else ""  # not [heap], [stack], ...
    return ""


def _madvise(start: int, length: int, advice: int) -> int:
    """madvise(2): 0, or the errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return 0 if libc.madvise(start, length, advice) == 0 else ctypes.get_errno()


def use_huge_pages(t: torch.Tensor, advise: bool = True) -> HugePages:
    """Advise `t`'s whole storage onto huge pages and collapse it now (see the module
    docstring); contents and addresses are unchanged. Safe to call twice. `advise=False`
    only measures (what is on huge pages without asking, e.g. with THP ``always``)."""
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if not sys.platform.startswith("linux"):
        return HugePages(nbytes, reason=f"not Linux ({sys.platform})")
    if t.device.type != "cpu":
        return HugePages(nbytes, reason=f"not on the CPU ({t.device})")
    mode = thp_mode()
    if mode in ("", "never"):
        return HugePages(nbytes, reason=f"transparent huge pages {mode or 'unavailable'}")
    start, end = aligned_range(storage.data_ptr(), nbytes)
    if end == start:
        return HugePages(nbytes, reason=TOO_SMALL)
    if not advise:
        return HugePages(nbytes, huge_bytes_in(start, end), "not asked for")
    reasons = []
    for name, advice in (("MADV_HUGEPAGE", MADV_HUGEPAGE), ("MADV_COLLAPSE", MADV_COLLAPSE)):
        err = _madvise(start, end - start, advice)
        if err:
            reasons.append(f"{name}: {os.strerror(err)}")
    huge = huge_bytes_in(start, end)
    if huge >= end - start:  # all of it on huge pages: a refused advice cost nothing
        return HugePages(nbytes, huge)
    source = mapped_file(start) if reasons else ""
    if source:  # a file's pages: Linux puts only anonymous memory on huge pages here
        reasons = [f"memory-mapped from {Path(source).name} ({'; '.join(reasons)}): Linux "
                   "puts only anonymous memory on huge pages here (a copy of the tensor is)"]
    if not reasons:
        reasons.append(f"{(end - start - huge) >> 10} KiB of the aligned range's "
                       f"{(end - start) >> 10} KiB not on huge pages")
    return HugePages(nbytes, huge, "; ".join(reasons))


def use_huge_pages_all(tensors: list[torch.Tensor | None], advise: bool = True) -> HugePages:
    """`use_huge_pages` on each distinct storage among `tensors` (views of one storage
    count once; None skipped), summed; the reason is the first one met, a storage too small
    for a huge page counting only when no storage had room for one."""
    seen: set[int] = set()
    nbytes = huge = 0
    reason = ""
    too_small = False
    for t in tensors:
        if t is None or t.untyped_storage().data_ptr() in seen:
            continue
        seen.add(t.untyped_storage().data_ptr())
        done = use_huge_pages(t, advise)
        nbytes, huge = nbytes + done.nbytes, huge + done.huge_bytes
        if done.reason == TOO_SMALL:
            too_small = True
        else:
            reason = reason or done.reason
    return HugePages(nbytes, huge, reason or (TOO_SMALL if too_small and not huge else ""))
