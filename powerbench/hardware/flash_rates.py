"""Read time of a phone's flash (UFS) tier: bandwidth by block size, access pattern,
issuing core class and the number of cores issuing at once.

Figures come from the hardware profile's `memories.flash.extra` (oneplus12: PowerInfer-2's
UFS 4.0 measurements, from the PowerInfer-2 paper):

    random reads   4 KB: per issuing core class (big 1.076, mid 1.008, little 0.762 GB/s)
                   512 KB: rand_read_512k_gb_s (3.5)
    sequential     4 KB: seq_read_4k_gb_s (0.45) ... 512 KB: seq_read_512k_gb_s (4.0)

Between 4 KB and 512 KB the bandwidth is interpolated linearly in log2(block) (our
interpolation: the paper gives only the two ends); above 512 KB it stays at the 512 KB
figure. A read below 4 KB costs a whole 4 KB read (the device's IOPS limit: bandwidth
scales with the block). UFS has ONE command queue: n > 1 cores issuing at once lose
`concurrent_issue_loss * (1 - 1/n)` of the bandwidth (up to the measured 40%; the shape
in n is ours).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from powerbench.hardware.hardware_profile import HardwareProfile

KB = 1024.0
SMALL_BLOCK = 4 * KB
LARGE_BLOCK = 512 * KB
CORE_CLASSES = ("big", "mid", "little")
REQUIRED = ("seq_read_4k_gb_s", "seq_read_512k_gb_s", "rand_read_512k_gb_s",
            "rand_read_4k_big_core_gb_s", "rand_read_4k_mid_core_gb_s",
            "rand_read_4k_little_core_gb_s", "concurrent_issue_loss")


@dataclass(frozen=True)
class FlashRates:
    """Measured flash read bandwidths, bytes/s."""

    seq_4k: float
    seq_512k: float
    rand_512k: float
    rand_4k_core: dict[str, float]  # core class -> 4 KB random reads issued from one core
    concurrent_issue_loss: float

    @classmethod
    def from_hardware(cls, hw: HardwareProfile, tier: str = "flash") -> FlashRates:
        mem = hw.memories.get(tier)
        if mem is None:
            raise ValueError(f"hardware {hw.name!r} has no {tier!r} memory tier (a phone "
                             "profile lists its UFS figures under memories.flash)")
        missing = [k for k in REQUIRED if k not in mem.extra]
        if missing:
            raise ValueError(f"hardware {hw.name!r}: memories.{tier}.extra lacks {missing}")
        e = mem.extra
        return cls(seq_4k=e["seq_read_4k_gb_s"] * 1e9, seq_512k=e["seq_read_512k_gb_s"] * 1e9,
                   rand_512k=e["rand_read_512k_gb_s"] * 1e9,
                   rand_4k_core={c: e[f"rand_read_4k_{c}_core_gb_s"] * 1e9
                                 for c in CORE_CLASSES},
                   concurrent_issue_loss=float(e["concurrent_issue_loss"]))

    def queue_factor(self, issuers: int) -> float:
        """Share of the bandwidth left when `issuers` cores share the one command queue."""
        if issuers < 1:
            raise ValueError(f"issuing cores must be >= 1, got {issuers}")
        return 1.0 - self.concurrent_issue_loss * (1.0 - 1.0 / issuers)

    def bandwidth(self, block: float, random: bool = True, core: str = "big",
                  issuers: int = 1) -> float:
        """Bytes/s reading blocks of `block` bytes (>= 4 KB; smaller reads: read_time)."""
        if core not in self.rand_4k_core:
            raise ValueError(f"core class {core!r} is not one of {CORE_CLASSES}")
        lo, hi = (self.rand_4k_core[core], self.rand_512k) if random else (self.seq_4k,
                                                                           self.seq_512k)
        b = min(max(float(block), SMALL_BLOCK), LARGE_BLOCK)
        w = math.log2(b / SMALL_BLOCK) / math.log2(LARGE_BLOCK / SMALL_BLOCK)
        return (lo + w * (hi - lo)) * self.queue_factor(issuers)

    def read_time(self, n_reads: np.ndarray | float, block: float, random: bool = True,
                  core: str = "big", issuers: int = 1) -> np.ndarray:
        """Seconds for `n_reads` reads of `block` bytes each (a read below 4 KB costs 4 KB)."""
        charged = max(float(block), SMALL_BLOCK)
        bw = self.bandwidth(charged, random, core, issuers)
        return np.asarray(n_reads, dtype=np.float64) * charged / bw
