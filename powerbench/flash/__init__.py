"""PowerInfer-2's flash-offloaded FFN: weights in a file, a segmented neuron cache in DRAM.

- `layout`: the bundled / unbundled, cluster-aligned weight file (header, checksums)
- `reader`: page-cache-bypassing (O_DIRECT) reads through an I/O thread pool
- `cache`: the segmented neuron cache (pinned hot + per-layer LRU), policy only
- `pipeline`: one layer call: lookup, reads overlapped with the resident neurons' compute
- `ffn`: `FlashFFN`, the decoder FFN for engine=flash
- `bench`: FFN-only decode benchmark against the in-DRAM `SparseFFN`

Needs torch and numpy only.
"""

from powerbench.flash.ffn import FlashFFN
from powerbench.flash.layout import LayoutError, LayoutGeometry, LayoutHeader
from powerbench.flash.layout_io import ensure_layout, open_layout, read_layout, write_layout
from powerbench.flash.read_plan import aligned_buffer
from powerbench.flash.reader import DirectReader
from powerbench.solver.neuron_cache import (
    CacheStats,
    SegmentedNeuronCache,
    SegmentPlan,
    plan_segments,
)

__all__ = [
    "CacheStats",
    "DirectReader",
    "FlashFFN",
    "LayoutError",
    "LayoutGeometry",
    "LayoutHeader",
    "SegmentPlan",
    "SegmentedNeuronCache",
    "aligned_buffer",
    "ensure_layout",
    "open_layout",
    "plan_segments",
    "read_layout",
    "write_layout",
]
