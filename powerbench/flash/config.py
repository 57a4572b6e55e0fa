"""Typed schema of `engine=flash`: our decoder with PowerInfer-2's flash-offloaded FFN.

Registered in the `engine` config group beside the engine package's own schemas (the flash
engine sits above the engine package, so its schema lives here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from powerbench.engine.config import DecoderEngineConfig, FFNConfig


@dataclass
class FlashFFNConfig(FFNConfig):
    """`FlashFFN` (powerbench.flash.ffn): FFN weights in a bundled file, a segmented neuron
    cache in DRAM, missing clusters read with O_DIRECT while resident neurons compute."""

    _target_: str = "powerbench.flash.ffn.FlashFFN"
    needs_predictor: ClassVar[bool] = True  # the engine needs predictor=... (engine/config.py)
    backend: str = "sparse_cpu"
    dram_budget_fraction: float | None = 0.5  # of the FFN weight bytes; or dram_budget_gb
    dram_budget_gb: float | None = None
    hot_fraction: float = 0.5  # share of the budget pinned for the hottest clusters
    preload_lru: bool = True  # warm-start the LRU segments with the next hottest clusters
    cluster_neurons: int | None = None  # None: the fewest neurons filling 4 KB
    bundled: bool = True  # False: separate matrices (ablation; 2-3 reads per cluster)
    pipeline: bool = True  # overlap the reads with the resident neurons' compute
    io_engine: str = "auto"  # auto: aio with O_DIRECT, else threads | aio | threads
    io_threads: int = 16  # threads: workers = reads in flight (queue depth)
    io_depth: int = 128  # aio: reads in flight at most
    io_submit_thread: bool = False  # aio: io_submit from a pool worker while the caller computes
    compute_threads: int | None = None  # the sparse kernels' threads during FFN calls
    direct: bool = True  # O_DIRECT (falls back to buffered with a warning)
    max_read_kb: int = 1024  # coalesced read size cap
    verify: str = "header"  # header | full (also the payload CRCs, reads the file)
    path: str | None = None  # None: <cache_dir>/flash/<shape>-<fingerprint>.pbflash
    cache_dir: str | None = None
    dense_from_rows: int = 32  # calls of >= 32 rows (prompts) compute every neuron
    lookahead: bool = False  # read the next layer's predicted misses ahead
    compiled_plan: bool = True  # the compiled per-call planner (False: numpy)


@dataclass
class FlashEngineConfig(DecoderEngineConfig):
    name: str = "flash"
    ffn: FlashFFNConfig = field(default_factory=FlashFFNConfig)

    def cpu_only(self) -> str | None:
        return ("engine=flash streams the FFN from its file into a DRAM neuron cache and "
                "computes it on the CPU")


SCHEMAS = {"flash": FlashEngineConfig}
