"""The solver input (PlacementProblem) and the byte model every solver shares."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from powerbench.hardware.hardware_profile import GB, HardwareProfile
from powerbench.model.spec import ModelSpec, WeightDType, bytes_per_param
from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.solver.config import SolverConfig, SparseSolverConfig
from powerbench.solver.placement import DeviceBytes, PlacementInfeasibleError


@dataclass
class PlacementProblem:
    spec: ModelSpec
    profile: ActivationProfile
    hardware: HardwareProfile
    weight_dtype: WeightDType = WeightDType("fp16")
    context: int | None = None  # None: the solver config's, else the model's max_positions
    predictor_bytes: np.ndarray | None = None  # per layer, measured by the predictors stage

    def __post_init__(self) -> None:
        self.weight_dtype = WeightDType(self.weight_dtype)
        if self.profile.n_layers != self.spec.n_layers:
            raise ValueError(f"profile has {self.profile.n_layers} layers, model "
                             f"{self.spec.name} has {self.spec.n_layers}")
        for layer in self.profile.layers:
            if layer.n_neurons != self.spec.neurons_per_layer:
                raise ValueError(f"profile layer {layer.index} has {layer.n_neurons} neurons, "
                                 f"model {self.spec.name} has {self.spec.neurons_per_layer}")
        if self.predictor_bytes is not None:
            arr = np.broadcast_to(np.asarray(self.predictor_bytes, dtype=np.float64),
                                  (self.spec.n_layers,)).copy()
            self.predictor_bytes = arr

    @cached_property
    def frequencies(self) -> list[np.ndarray]:
        """Per layer: neuron activation frequency (impact v_n), clipped to [0, 1]."""
        return [np.clip(layer.frequency, 0.0, 1.0) for layer in self.profile.layers]

    @cached_property
    def order(self) -> list[np.ndarray]:
        """Per layer: neuron ids by descending frequency (stable: ties by id)."""
        return [np.argsort(-f, kind="stable") for f in self.frequencies]

    @cached_property
    def sorted_frequencies(self) -> list[np.ndarray]:
        return [f[o] for f, o in zip(self.frequencies, self.order, strict=True)]


@dataclass(frozen=True)
class ByteModel:
    """Bytes of every movable part of one model on one machine."""

    n_layers: int
    neurons: int  # per layer
    neuron_bytes: float  # M_n
    attn: float  # attention weights per layer
    kv: float  # KV cache per layer at the configured context
    predictor: np.ndarray  # per layer (zeros for dense solvers)
    embed_in: float  # input embedding on its own (0 when tied to the output)
    lm_head: float  # output projection (the shared table when tied)
    gpu_capacity: float
    cpu_capacity: float
    unified: bool
    has_gpu: bool
    gpu_buffer: float
    cpu_buffer: float

    @property
    def ffn_layer(self) -> float:
        return self.neurons * self.neuron_bytes

    @property
    def ffn_total(self) -> float:
        return self.n_layers * self.ffn_layer

    @property
    def dense_layer(self) -> np.ndarray:
        """Per layer: attention + KV + predictor (what PowerInfer offloads first)."""
        return self.attn + self.kv + self.predictor

    @property
    def required_total(self) -> float:
        """Everything, on whichever device (buffers on both when there is an accelerator)."""
        return (self.ffn_total + float(self.dense_layer.sum()) + self.embed_in + self.lm_head
                + self.cpu_buffer + (self.gpu_buffer if self.has_gpu else 0.0))

    @property
    def capacity_total(self) -> float:
        return self.cpu_capacity if self.unified else self.cpu_capacity + self.gpu_capacity

    def breakdown(self) -> str:
        pred = float(self.predictor.sum())
        return (f"FFN {self.ffn_total / GB:.2f} + attention {self.n_layers * self.attn / GB:.2f}"
                f" + KV {self.n_layers * self.kv / GB:.2f} + predictors {pred / GB:.2f}"
                f" + embeddings {(self.embed_in + self.lm_head) / GB:.2f} + buffers "
                f"{(self.cpu_buffer + (self.gpu_buffer if self.has_gpu else 0)) / GB:.2f} GB")


def resolve_context(cfg: SolverConfig, problem: PlacementProblem) -> int:
    if problem.context is not None:
        return int(problem.context)
    if cfg.context is not None:
        return int(cfg.context)
    return int(problem.spec.max_positions)


def predictor_bytes(cfg: SolverConfig, problem: PlacementProblem) -> np.ndarray:
    """Per-layer predictor bytes: measured if given, else from `predictor_hidden`."""
    spec = problem.spec
    if not isinstance(cfg, SparseSolverConfig):
        return np.zeros(spec.n_layers)
    return layer_predictor_bytes(problem, cfg.predictor_hidden, cfg.predictor_dtype)


def layer_predictor_bytes(problem: PlacementProblem, hidden: int,
                          dtype: WeightDType) -> np.ndarray:
    """The problem's measured per-layer predictor bytes, else an MLP d_model -> `hidden` ->
    neurons per layer stored in `dtype`."""
    spec = problem.spec
    if problem.predictor_bytes is not None:
        return np.asarray(problem.predictor_bytes, dtype=np.float64)
    params = hidden * (spec.d_model + spec.neurons_per_layer)
    return np.full(spec.n_layers, params * bytes_per_param(dtype))


def byte_model(cfg: SolverConfig, problem: PlacementProblem) -> ByteModel:
    spec, hw, dtype = problem.spec, problem.hardware, problem.weight_dtype
    emb = spec.vocab_size * spec.d_model * bytes_per_param(dtype)
    return ByteModel(
        n_layers=spec.n_layers,
        neurons=spec.neurons_per_layer,
        neuron_bytes=spec.neuron_bytes(dtype),
        attn=spec.attn_bytes_per_layer(dtype),
        kv=spec.kv_cache_bytes(resolve_context(cfg, problem),
                               bytes_per_value=cfg.kv_bytes_per_value) / spec.n_layers,
        predictor=predictor_bytes(cfg, problem),
        embed_in=0.0 if spec.tied_embeddings else emb,
        lm_head=emb,
        gpu_capacity=hw.gpu_capacity,
        cpu_capacity=hw.cpu_capacity,
        unified=hw.unified,
        has_gpu=hw.has_accelerator,
        gpu_buffer=cfg.gpu_buffer_gb * GB if hw.has_accelerator else 0.0,
        cpu_buffer=cfg.cpu_buffer_gb * GB,
    )


def check_fits_anywhere(bm: ByteModel, what: str) -> None:
    """Raise if the model cannot fit even with every byte of both memories used."""
    if bm.required_total > bm.capacity_total:
        where = "shared memory" if bm.unified else (
            f"GPU usable {bm.gpu_capacity / GB:.2f} + CPU usable {bm.cpu_capacity / GB:.2f} GB"
            if bm.has_gpu else f"CPU usable {bm.cpu_capacity / GB:.2f} GB, no accelerator")
        raise PlacementInfeasibleError(
            "CPU" if not bm.has_gpu or bm.unified else "GPU+CPU", bm.required_total,
            bm.capacity_total, f"{what} fits nowhere ({where}); it needs {bm.breakdown()}")


def check_capacity(gpu: DeviceBytes, cpu: DeviceBytes, bm: ByteModel, what: str) -> None:
    """Raise PlacementInfeasibleError naming the first budget a placement overflows."""
    tol = 1.0  # bytes: float rounding
    if bm.unified:
        if gpu.total + cpu.total > bm.cpu_capacity + tol:
            raise PlacementInfeasibleError("CPU+GPU shared", gpu.total + cpu.total,
                                           bm.cpu_capacity, what)
        return
    if gpu.total > bm.gpu_capacity + tol:
        raise PlacementInfeasibleError("GPU", gpu.total, bm.gpu_capacity, what)
    if cpu.total > bm.cpu_capacity + tol:
        raise PlacementInfeasibleError("CPU", cpu.total, bm.cpu_capacity, what)
