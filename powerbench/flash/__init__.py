"""PowerInfer-2's flash-offloaded FFN: weights in a file, a segmented neuron cache in DRAM.

- `layout`, `layout_io`: the bundled / unbundled, cluster-aligned weight file (geometry,
  header, checksums; the streamed, resumable writer and the checks)
- `synthetic_file`: a synthetic model's file drawn layer by layer (the FFN never in DRAM)
- `read_plan`, `reader`, `aio`, `uring`, `workers`: page-cache-bypassing (O_DIRECT) reads,
  batched (native AIO, io_uring or a thread pool)
- `arena`, `layer_pipeline`, `plan`: one layer call: cache lookup (compiled planner),
  reads overlapped with the resident neurons' compute
- `ffn`: `FlashFFN`, the decoder FFN for engine=flash (the cache policy is
  `powerbench.solver.neuron_cache`)

Its benchmarks live in the measurement layer (`powerbench.measure.flash_*`: the FFN-only
benchmark against the in-DRAM `SparseFFN`, the model larger than its memory cap against
llama.cpp's mmap, the unit costs, the lookahead recall).

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
