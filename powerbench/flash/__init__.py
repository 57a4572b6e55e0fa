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

Needs torch and numpy only; every name loads on first use, so the config schema
(`flash.config`) imports without torch.
"""

from powerbench.build import lazy_attributes

_LAZY = {
    "FlashFFN": "powerbench.flash.ffn",
    "LayoutError": "powerbench.flash.layout",
    "LayoutGeometry": "powerbench.flash.layout",
    "LayoutHeader": "powerbench.flash.layout",
    "ensure_layout": "powerbench.flash.layout_io",
    "open_layout": "powerbench.flash.layout_io",
    "read_layout": "powerbench.flash.layout_io",
    "write_layout": "powerbench.flash.layout_io",
    "aligned_buffer": "powerbench.flash.read_plan",
    "DirectReader": "powerbench.flash.reader",
    "CacheStats": "powerbench.solver.neuron_cache",
    "SegmentedNeuronCache": "powerbench.solver.neuron_cache",
    "SegmentPlan": "powerbench.solver.neuron_cache",
    "plan_segments": "powerbench.solver.neuron_cache",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

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
