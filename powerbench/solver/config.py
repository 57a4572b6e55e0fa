"""Typed schemas for the `solver` config group (registered in Hydra's ConfigStore)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from powerbench.model.spec import WeightDType
from powerbench.schema_helpers import MISSING, coerce_enums

# Memory a PC solver leaves free beside the weights and the KV cache (sources and ranges:
# the constants registry, docs/constants.md).
GPU_BUFFER_GB = 1.0  # compute / scratch buffers and the BLAS workspace on the accelerator
CPU_BUFFER_GB = 2.0  # compute buffers, tokenizer, runtime on the host


class CommMode(StrEnum):
    """How the per-layer minimum GPU share C_l is derived (PowerInfer paper, §6).

    Member names are lowercase because OmegaConf matches enum values by member name.

    off: no communication term (C_l = 0; PowerInfer's released top-k behaviour).
    dense: the paper's rule, C_l * T_gpu + T_sync <= C_l * T_cpu with T_u = M_n / BW_u
           (every neuron of the layer is read once per token).
    expected: as dense but each neuron is read only when active, so T_u is scaled by the
           layer's mean activation frequency (sparse decode: far larger C_l).
    """

    off = "off"
    dense = "dense"
    expected = "expected"


class DensePolicy(StrEnum):
    """How the sparse solvers give GPU bytes to the dense parts (attention + KV cache,
    predictors, output projection).

    first: PowerInfer's loader: dense parts take the accelerator first (output projection,
           then each layer's attention + KV + predictor in layer order, up to
           `dense_gpu_share`), FFN neurons get what is left.
    impact: dense parts and FFN neuron groups compete for the same GPU bytes in one
           optimisation by impact per byte: the time a token saves when the item's bytes
           are read from GPU instead of CPU memory, bytes_read x (1/BW_cpu - 1/BW_gpu);
           dense parts are read every token, a neuron only when active (x frequency).
    """

    first = "first"
    impact = "impact"


class Backend(StrEnum):
    highs = "highs"
    scip = "scip"


@dataclass
class SolverConfig:
    """What every solver shares: the memory it must leave for KV cache and buffers."""

    _target_: str = MISSING
    name: str = MISSING
    context: int | None = None  # KV-cache tokens reserved (None: the model's max_positions)
    kv_bytes_per_value: float = 2.0  # fp16 KV cache
    gpu_buffer_gb: float = GPU_BUFFER_GB  # compute / scratch buffers on the accelerator
    cpu_buffer_gb: float = CPU_BUFFER_GB  # compute buffers, tokenizer, runtime on the host
    lm_head_on_gpu: bool = True  # the output projection, where it fits

    def __post_init__(self) -> None:
        coerce_enums(self)


@dataclass
class SparseSolverConfig(SolverConfig):
    """Hot/cold neuron solvers (PowerInfer): dense parts first, then FFN neurons."""

    # Share of the accelerator's free memory the dense parts (attention + its KV cache +
    # predictor, layer by layer in order) may take before FFN neurons get the rest.
    # 1.0 = PowerInfer's loader: "it first tries to offload dense layers to VRAM (attention,
    # predictor, etc.), then it tries to split hot neurons of the FFN into VRAM if there is
    # still space left" (PowerInfer docs/token_generation_performance_tips.md).
    dense_gpu_share: float = 1.0
    dense_policy: DensePolicy = DensePolicy.first
    # impact policy: KV-cache tokens read per decode step (None: the reserved `context`,
    # i.e. the cache is read in full). Only the impact of the KV cache uses it; its bytes
    # stay those of the reserved context.
    kv_read_tokens: int | None = None
    # Predictor MLP per layer: d_model -> hidden -> neurons, used when solve() is not given
    # measured predictor sizes (predictors stage).
    predictor_hidden: int = 1024
    predictor_dtype: WeightDType = WeightDType("fp16")
    communication: CommMode = CommMode.dense
    t_sync_us: float | None = None  # override the hardware profile's sync cost


@dataclass
class GreedyConfig(SparseSolverConfig):
    """Global top-k by activation frequency (C_l is only reported, never enforced)."""

    _target_: str = "powerbench.solver.greedy.solve_greedy"
    name: str = "greedy"


@dataclass
class ILPConfig(SparseSolverConfig):
    _target_: str = "powerbench.solver.ilp.solve_ilp"
    name: str = "ilp"
    group_size: int = 128  # neurons per binary (sorted by impact within a layer)
    backend: Backend = Backend.highs
    presolve: bool = False  # HiGHS: presolve off is much faster on this structure
    time_limit_s: float = 30.0
    mip_gap: float = 0.01  # relative gap at which the backend stops
    threads: int | None = None  # backend threads (None: the backend's default)
    backend_options: dict[str, Any] = field(default_factory=dict)  # passed to the backend
    order_groups: bool = True  # symmetry breaking: a layer's groups are taken hottest-first
    warm_start: bool = True  # HiGHS starts from the Lagrangian heuristic's placement
    refine: bool = True  # exact neuron-level refinement + heuristic incumbents
    verbose: bool = False


@dataclass
class LayerOffloadConfig(SolverConfig):
    """llama.cpp `-ngl`: whole layers (attention, KV, FFN) on the accelerator."""

    _target_: str = "powerbench.solver.baselines.solve_layer_offload"
    name: str = "layer_offload"
    n_gpu_layers: int | None = None  # None: as many as fit
    from_end: bool = True  # llama.cpp offloads the *last* n layers (i >= n_layer - ngl)


@dataclass
class AllGPUConfig(SolverConfig):
    _target_: str = "powerbench.solver.baselines.solve_all_gpu"
    name: str = "all_gpu"


@dataclass
class AllCPUConfig(SolverConfig):
    _target_: str = "powerbench.solver.baselines.solve_all_cpu"
    name: str = "all_cpu"
    lm_head_on_gpu: bool = False


SCHEMAS = {
    "ilp": ILPConfig,
    "greedy": GreedyConfig,
    "layer_offload": LayerOffloadConfig,
    "all_gpu": AllGPUConfig,
    "all_cpu": AllCPUConfig,
}
