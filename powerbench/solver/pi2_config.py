"""Typed schema of `solver=pi2_planner` (schema/solver/pi2_planner): PowerInfer-2's offline
planner and the phone baselines' memory plans (powerbench.solver.pi2_planner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from powerbench.model.spec import WeightDType
from powerbench.schema_helpers import coerce_enums
from powerbench.solver.config import SolverConfig


class PlanStrategy(StrEnum):
    """powerinfer2: hot neurons pinned by frequency + an LRU cold cache, bundled clusters
        (size chosen by the planner), predictors resident.
    llmflash: LLM-in-a-Flash: predictor-selected neurons, row-column bundling, the whole
        neuron cache one LRU (no hot/cold segmentation), one neuron per read.
    mmap: llama.cpp: dense, weights mmap-ed; a fixed part stays in the page cache, the rest
        is paged in from flash every token; no predictors."""

    powerinfer2 = "powerinfer2"
    llmflash = "llmflash"
    mmap = "mmap"


class Bundle(StrEnum):
    """How one neuron's rows sit in flash. all: gate, up and down rows in one read;
    up_down: up and down bundled, gate apart (ReLU fc1/fc2 models: same as all); none: one
    read per matrix."""

    all = "all"
    up_down = "up_down"
    none = "none"


@dataclass
class PI2PlannerConfig(SolverConfig):
    _target_: str = "powerbench.solver.pi2_planner.solve_pi2"
    name: str = "pi2_planner"
    strategy: PlanStrategy = PlanStrategy.powerinfer2
    dram_budget_gb: float | None = None  # None: the usable DRAM of the hardware profile
    # the budget instead as "this share of the FFN's bytes in flash" (PowerInfer-2's "50%
    # offload" setting): the dense parts every system keeps (attention, KV cache,
    # embeddings, buffers; not predictors) + (1 - share) of the FFN bytes, the same for
    # every strategy (PowerInfer-2 pays for its predictors out of it)
    ffn_offload_fraction: float | None = None
    hot_share: float = 0.5  # share of the neuron cache pinned hot (powerinfer2)
    cluster_neurons: int | None = None  # None: the planner picks from cluster_candidates
    cluster_candidates: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    bundle: Bundle = Bundle.all
    compute_clusters: list[str] | None = None  # CPU clusters for decode (None: planner)
    io_core: str | None = None  # big | mid | little (None: planner)
    io_cores: int = 1  # cores issuing flash reads at once
    mmap_block_kb: float = 128.0  # llama.cpp: bytes per page-in (readahead)
    # llama.cpp page faults (kernel time per fault; sources in conf/solver/pi2_planner.yaml)
    mmap_major_fault_us: float = 5.0
    mmap_minor_fault_us: float = 1.0
    mmap_fault_around_kb: float = 64.0
    warm_tokens: int = 64
    predictor_hidden: int = 1024
    predictor_dtype: WeightDType = WeightDType("fp16")
    gpu_buffer_gb: float = 0.5  # NPU graph buffers (in the shared DRAM)
    cpu_buffer_gb: float = 1.0
    lm_head_on_gpu: bool = False  # decode runs on the CPU

    def __post_init__(self) -> None:
        super().__post_init__()
        coerce_enums(self)
        if not 0.0 <= self.hot_share <= 1.0:
            raise ValueError(f"solver.hot_share must be in [0, 1], got {self.hot_share}")
        if min(self.mmap_major_fault_us, self.mmap_minor_fault_us) < 0 or \
                self.mmap_fault_around_kb <= 0 or self.mmap_block_kb <= 0:
            raise ValueError("solver.mmap_*: fault costs must be >= 0 and sizes > 0")
        if self.ffn_offload_fraction is not None:
            if not 0.0 <= self.ffn_offload_fraction <= 1.0:
                raise ValueError("solver.ffn_offload_fraction must be in [0, 1], got "
                                 f"{self.ffn_offload_fraction}")
            if self.dram_budget_gb is not None:
                raise ValueError("give solver.dram_budget_gb or solver.ffn_offload_fraction, "
                                 "not both")
        if self.dram_budget_gb is not None and self.dram_budget_gb <= 0:
            raise ValueError(f"solver.dram_budget_gb must be > 0, got {self.dram_budget_gb}")


SCHEMAS = {"pi2_planner": PI2PlannerConfig}
