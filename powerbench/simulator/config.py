"""Typed schema of the `simulator` group (`simulator=cost_model`; schema/simulator/cost_model).

Plain dataclasses (no omegaconf import): the cost model takes a `SimulatorConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from powerbench.schema_helpers import check_range, coerce_enums


class ComputeMode(StrEnum):
    """What the FFN computes per token. Member names equal values (OmegaConf matches names).

    sparse: the predictor-selected neurons only (PowerInfer), plus the predictor itself.
    dense: every FFN neuron on its placed device, no predictor (llama.cpp, our `dense`).
    """

    sparse = "sparse"
    dense = "dense"


class PrefillMode(StrEnum):
    """How the prompt is processed (see `powerbench.simulator.prefill`).

    gpu_stream: every matrix product of a prompt batch of at least `gpu_min_tokens` runs
        densely on the accelerator; weights resident on the host are streamed over the link
        (llama.cpp's CUDA back-end rule for batches >= 32, inherited by PowerInfer).
    hybrid: the prompt goes through the decode cost model as one batch of P x B tokens
        (each device reads its own neurons in the union over the prompt, or all in dense
        mode; FLOPs per `token_skip`). PowerInfer's neuron-aware operators do this
        (`experiment/system=powerinfer`). Also what CPU-only machines and short prompts
        always use.
    dense: like hybrid, but a prompt batch of at least `gpu_min_tokens` rows computes every
        neuron where it is placed (an engine that hands large batches to dense GEMMs, as
        our sparse CPU engine does from `dense_from_rows` rows).
    powerinfer_public: like hybrid, but each sparse FFN operator reads its weight rows as
        PowerInfer's public code does for a prompt batch (`PublicPromptReads`; see
        powerbench.simulator.public_prompt): once per pass, or again for every token.
    """

    gpu_stream = "gpu_stream"
    hybrid = "hybrid"
    dense = "dense"
    powerinfer_public = "powerinfer_public"


class WeightReads(StrEnum):
    """How often a sparse FFN operator reads an active weight row in a prompt pass.

    once: one read per pass for the union of its tokens (the row stays in cache while the
        operator loops over the tokens that use it).
    per_token: one read per (neuron, token) pair that uses it (the operator loops over the
        tokens outside, or re-loads the row for every pair).
    """

    once = "once"
    per_token = "per_token"


@dataclass
class OpCounts:
    """Kernels (accelerator) or operators (CPU) issued per layer for each part.

    Defaults: our reading of a llama.cpp graph for one decoder layer (norm + affine,
    Q/K/V/O products and bias adds, RoPE, KV copies, QK, scale, mask, softmax, PV,
    permutes, residual add ~ 20; dense FFN: norm, up/gate, bias, activation, down, bias,
    residual ~ 8; predictor: two products and an activation ~ 3; sparse FFN: the two
    neuron-aware operators and a residual add ~ 3). Validation on `local` replaces them
    with counts taken from our engine (powerbench.simulator.validate.count_ops).
    """

    attention: int = 20
    predictor: int = 3
    ffn_dense: int = 8
    ffn_sparse: int = 3
    lm_head: int = 3  # final norm, product, copy out


@dataclass
class PublicPromptReads:
    """Weight reads of the sparse FFN operators in a prompt pass
    (`prefill.mode=powerinfer_public`), per device and operator: `up` is the up (and gate)
    projection (mul_mat_sparse), `down` the down projection (axpy). conf/simulator/
    cost_model.yaml gives each one's code line. A prompt of more than
    `gpu_down_gemm_above_rows` rows runs the accelerator's down projection as one dense GEMM
    over all its rows instead (each weight converted to fp32 first)."""

    cpu_up: WeightReads = WeightReads.once
    cpu_down: WeightReads = WeightReads.per_token
    gpu_up: WeightReads = WeightReads.per_token
    gpu_down: WeightReads = WeightReads.per_token
    gpu_down_gemm_above_rows: int = 100

    def __post_init__(self) -> None:
        coerce_enums(self)
        check_range("simulator.prefill.public.gpu_down_gemm_above_rows",
                    self.gpu_down_gemm_above_rows, 1)


@dataclass
class PrefillConfig:
    mode: PrefillMode = PrefillMode.gpu_stream
    gpu_min_tokens: int = 32  # llama.cpp: large-batch matmuls go to the GPU from 32 rows
    public: PublicPromptReads = field(default_factory=PublicPromptReads)

    def __post_init__(self) -> None:
        coerce_enums(self)


@dataclass
class KernelEfficiency:
    """Achieved share of a device's effective memory bandwidth, by kernel kind: weight
    bytes are charged at bandwidth x factor. Global (every model, every hardware profile);
    1.0 = the roofline. `int4` multiplies the others for int4 weights (dequantising
    kernels). conf/simulator/cost_model.yaml gives each its source."""

    cpu_dense: float = 1.0
    cpu_sparse: float = 1.0  # neuron-aware sparse FFN operator on the host
    gpu_dense: float = 1.0
    gpu_sparse: float = 1.0  # neuron-aware sparse FFN operator on the accelerator
    int4: float = 1.0
    # int4 down projection of the accelerator's sparse FFN (PowerInfer's Q4_0 axpy, a
    # float-dequantising DMMV-class kernel) relative to the int4 kernels `int4` describes
    # (llama.cpp's integer-dot MMVQ class); 1.0 = the same rate
    int4_axpy: float = 1.0

    def factor(self, device: str, sparse: bool, int4: bool) -> float:
        value = getattr(self, f"{device}_{'sparse' if sparse else 'dense'}")
        value *= self.int4 if int4 else 1.0
        if not 0.0 < self.int4_axpy <= 1.0:
            raise ValueError(f"simulator.efficiency.int4_axpy is {self.int4_axpy}: it must be "
                             "in (0, 1]")
        if not 0.0 < value <= 1.0:
            raise ValueError(f"simulator.efficiency for {device} ({'sparse' if sparse else 'dense'}"
                             f"{', int4' if int4 else ''}) is {value}: it must be in (0, 1]")
        return value


@dataclass
class PredictorQualityConfig:
    """Recall and predicted / true active ratio our trained predictors reach, by a layer's
    true active fraction (powerbench.predictor.sized.PredictorQuality): what a shape-only
    model's sized predictors are charged. Empty: `predicted_over_true` and recall 1."""

    active_fraction: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    predicted_over_true: list[float] = field(default_factory=list)
    source: str = ""


@dataclass
class TokenOverlapConfig:
    """How much consecutive tokens' active sets overlap: the lag-1 autocorrelation rho of a
    neuron's activity (powerbench.profiling.token_overlap), by a layer's active fraction
    (interpolated in log(active), clamped at the ends). Applied to the union of a batch of
    tokens whose trace was drawn INDEPENDENTLY (synthetic profiles); measured traces carry
    their own overlap. Empty: independent draws (rho = 0), as `powerbench validate`'s twin
    uses it: the engine it is compared with replays the same independently drawn trace."""

    active_fraction: list[float] = field(default_factory=list)
    rho: list[float] = field(default_factory=list)
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.active_fraction) != len(self.rho):
            raise ValueError(f"simulator.token_overlap: active_fraction has "
                             f"{len(self.active_fraction)} points, rho {len(self.rho)}")
        if any(not 0.0 < a <= 1.0 for a in self.active_fraction):
            raise ValueError("simulator.token_overlap.active_fraction: each point must be in "
                             f"(0, 1], got {self.active_fraction}")
        if any(not 0.0 <= r < 1.0 for r in self.rho):
            raise ValueError(f"simulator.token_overlap.rho: each must be in [0, 1), got {self.rho}")

    def at(self, active: float) -> float:
        """rho at a layer's active fraction (0 without points)."""
        if not self.rho:
            return 0.0
        order = np.argsort(self.active_fraction)
        grid = np.log(np.asarray(self.active_fraction, dtype=np.float64)[order])
        values = np.asarray(self.rho, dtype=np.float64)[order]
        return float(np.interp(np.log(max(active, 1e-9)), grid, values))


@dataclass
class SimulatorConfig:
    """simulator=cost_model: the per-token cost model (powerbench.simulator)."""

    _target_: str = "powerbench.simulator.simulate.simulate"
    name: str = "cost_model"
    mode: ComputeMode = ComputeMode.sparse
    kv_bytes_per_value: float = 2.0  # fp16 KV cache
    activation_bytes: float = 2.0  # bytes per value of activations crossing the link
    # Predicted / truly active neurons per token (false positives; 1.0: an oracle).
    # Measured predictors override it per layer with their own test-split ratio.
    predicted_over_true: float = 1.0
    # Predictor bytes per layer when neither a PredictorSet nor the placement gives them:
    # an MLP d_model -> hidden -> neurons stored in fp16 (the solvers' default).
    predictor_hidden: int = 1024
    predictor_quality: PredictorQualityConfig = field(default_factory=PredictorQualityConfig)
    # Measured token-to-token overlap of active neurons: shrinks a batch's union over
    # independently drawn (synthetic) trace tokens. Empty: independent tokens.
    token_overlap: TokenOverlapConfig = field(default_factory=TokenOverlapConfig)
    efficiency: KernelEfficiency = field(default_factory=KernelEfficiency)
    # Sparse FLOPs count each row's own predicted neurons (PowerInfer's operators skip
    # inactive (neuron, token) pairs); false: the union for every row (powerbench.ops).
    # Bytes are the union either way. See powerbench.simulator.workload.
    token_skip: bool = False
    cpu_threads: int | None = None  # None: every core of the host
    # Per-operator CPU overhead (barrier / dispatch), microseconds. None: the profile's
    # `thread_sync_s` with an accelerator present (our default 1 us if unmeasured), and its
    # `launch_s` on CPU-only machines (there it is the measured CPU operator dispatch).
    cpu_op_us: float | None = None
    # Fixed cost of one neuron-aware sparse FFN call on the CPU BEYOND one operator dispatch
    # (its kernels' setup, the active-set pass, output allocation), microseconds, paid once
    # per layer in sparse mode. None: the profile's measured engine kernel (`local`), else
    # 0. Validation on `local` measures it (the fused
    # operator on an empty active set at the model's shapes, minus one dispatch).
    cpu_sparse_call_us: float | None = None
    # Per-thread rate of the host's sparse FFN operator, GB/s per thread: an operator that
    # gathers its rows one at a time without software prefetch waits on every row's first
    # lines, so its rate is threads x this until the bandwidth (x efficiency.cpu_sparse)
    # caps it (PowerInfer's own at 90-95% sparsity on the 2-vCPU EPYC: 5.7-7.4 GB/s per
    # thread with 8 KiB rows, 7.4-9.4 with 16 KiB ones, `powerbench bench-powerinfer-ops`).
    # Threads: `cpu_threads`, else every hardware thread of the host. None: bandwidth-bound
    # only.
    cpu_sparse_thread_gb_s: float | None = None
    # Host time of one neuron-aware sparse FFN call on the ACCELERATOR beyond its kernels'
    # launches (the binding's argument handling and small ATen calls), microseconds: the
    # launch-bound side of that call is then ops x launch_s + this (still max'ed with its
    # roofline). None/0: launches only. The hybrid benchmark measures it on the GPU (the
    # call's host time, GPU idle, minus its launches).
    gpu_sparse_call_us: float | None = None
    # The serving engine's own host time per forward pass that does NOT overlap the
    # device's work (Python scheduling, input preparation, per-layer launches issued from
    # Python, sampling): `host_layer_us` per layer plus `host_pass_us` per pass. 0 for the
    # C++ engines (llama.cpp, PowerInfer: their launch overhead is inside the published
    # batch-1 rates the efficiency factors come from); conf/simulator/vllm.yaml sets
    # vLLM's (late 2023, no CUDA graphs) from its public batch-1 results.
    host_layer_us: float = 0.0
    host_pass_us: float = 0.0
    # Fixed cost of one GPU -> CPU -> GPU round trip of a hybrid layer (its FFN on both
    # devices): the layer input copied to the host and synchronised, the CPU's worker
    # threads woken for its few operators, the partial sum copied back. None: one
    # `sync_s` of the profile. It sits on the other device's branch of the layer (the GPU
    # computes its own neurons meanwhile). conf/simulator/cost_model.yaml sources it.
    hybrid_roundtrip_us: float | None = None
    # The part of that round trip the home device's host thread spends itself, in series
    # with its own launches (handing x and the mask to the other device, taking its partial
    # sum back and queuing the add), microseconds per merge; the rest of the round trip
    # overlaps the home device's work. None: 0 (the whole trip overlaps). The hybrid
    # benchmark measures it (our engine's submit + merge host time).
    hybrid_host_us: float | None = None
    # Host merges per hybrid layer: how many times its FFN's partial results meet on the
    # host, each one round trip (PowerInfer's public code: 2, the up/gate outputs and the
    # down outputs; each extra merge also moves the d_ffn-wide activation both ways).
    hybrid_merges: int = 1
    gpu_ops: OpCounts = field(default_factory=OpCounts)
    cpu_ops: OpCounts = field(default_factory=OpCounts)
    prefill: PrefillConfig = field(default_factory=PrefillConfig)
    trace_offset: int = 0  # first trace token replayed
    breakdown_per_layer: bool = False  # also write a per-layer breakdown CSV

    def __post_init__(self) -> None:
        coerce_enums(self)


SCHEMAS = {"cost_model": SimulatorConfig}

