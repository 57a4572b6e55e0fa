"""A phone's flash plan: what of the FFN stays resident in DRAM and how the rest is read.

Made by the offline planner (powerbench.solver.pi2_planner); replayed by the simulator's
flash tier (powerbench.simulator.flash_tier) and followed by the flash engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from powerbench.solver.neuron_cache import SegmentPlan


class FlashPolicy(StrEnum):
    segmented = "segmented"
    mmap = "mmap"


@dataclass(frozen=True)
class FlashPlan:
    """What of the FFN is resident in DRAM and how the rest is laid out in flash."""

    policy: FlashPolicy
    cluster_neurons: int  # neurons per cluster (the caching and read unit)
    segments: SegmentPlan  # hot cluster ids per layer + LRU slots per layer
    neuron_bytes: float  # all matrices of one neuron (gate + up + down)
    reads_per_neuron: int = 1  # 1: bundled; else one read per matrix group
    block_bytes: float = 128 * 1024.0  # mmap: bytes per (readahead) read
    io_core: str = "big"  # class of the core(s) issuing the reads
    io_cores: int = 1  # cores issuing reads at once (one UFS command queue)
    warm_tokens: int = 64  # trace tokens replayed before the measured steps (not counted)
    page_cache_units: int = 0  # mmap: blocks (of cluster_neurons) the LRU page cache holds
    fault_s: float = 0.0  # mmap: kernel CPU seconds per readahead window paged in

    @property
    def cluster_bytes(self) -> float:
        return self.cluster_neurons * self.neuron_bytes
