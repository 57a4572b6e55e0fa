"""`engine=hybrid`: PowerInfer's hybrid FFN, measured. Hot neurons on the GPU through the
CUDA extension, cold neurons on the CPU through the C++ extension, computed CONCURRENTLY
per layer and merged on the GPU, following the placement (`solver=...`, `hardware=...`).

Per layer and forward (x on the GPU, attention and KV cache on the GPU):

    1. active set: the predictor's mask (or the oracle / every neuron), union over rows
    2. copy stream: x and the union -> pinned host memory (after 1); a worker thread waits
       for that copy and runs the CPU part with sparse_cpu (`powerbench.engine.hybrid_cpu`)
    3. main thread and stream: the GPU part, sparse_cuda with a device-side Threshold (no
       host sync), issued WHILE the worker computes (the launches are host time as well)
    4. main thread: wait for the worker only; its y goes host -> device without blocking
       from a pinned slot and is added on the main stream: y = y_gpu + y_cpu

One host synchronisation per layer (the worker's wait for x); between it and the next
layer's, the host runs ahead of the GPU. The CPU part's thread count is measured
(engine.ffn.cpu_threads=auto, see hybrid_cpu) or given. engine.ffn.cpu_part=inline runs
the CPU part on the main thread instead, in step 4, once the GPU part is issued (no worker
thread: no hand-off, no GIL shared while both parts run; see hybrid_cpu).

It needs a CUDA device: on a machine without one the engine stops with a clear message
(the CPU-only engines `dense`, `sparse_torch`, `sparse_cpu` and `simulate` remain).
Limitation: the decoder's own weights keep the whole FFN on the GPU as well, so GPU
memory use is not PowerInfer's (the split of the WORK, and its timing, is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from powerbench.engine.config import (
    ACTIVE_MODES,
    CPU_PART_MODES,
    DecoderEngineConfig,
    HybridEngineConfig,
)
from powerbench.engine.decoder import Decoder
from powerbench.engine.decoder_engine import DecoderEngine
from powerbench.engine.ffn import FFNObserver
from powerbench.engine.hybrid_cpu import CpuPartRunner
from powerbench.engine.weights import DecoderWeights, GatedFFNWeights, ReluFFNWeights
from powerbench.ops import get_backend
from powerbench.ops import weights as opw
from powerbench.ops.interface import SparseOps, Threshold

if TYPE_CHECKING:
    from powerbench.model.loading import LoadedModel

MAX_TIMED_CALLS = 8192  # decode calls whose GPU part is timed with CUDA events
DECODE_ROWS = 8  # calls of at most this many rows are decode steps (timed separately)
# what a machine without CUDA can run instead: the cost model's estimate of the split
SIMULATE_INSTEAD = ("simulator=cost_model hardware=pc_high solver=ilp predictor=adaptive (or "
                    "another GPU hardware profile) simulates the hybrid split instead")
NO_CUDA = ("engine=hybrid computes hot neurons on a CUDA GPU and cold neurons on the CPU, "
           "and this machine has no CUDA device (torch {version}, {build} build). Use a "
           "CPU-only engine here (engine=sparse_cpu, sparse_torch or dense), or "
           + SIMULATE_INSTEAD + "; run engine=hybrid on a machine with an NVIDIA GPU.")


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(NO_CUDA.format(version=torch.__version__,
                                          build=torch.version.cuda or "CPU-only"))


@dataclass
class _Part:
    """One device's share of a layer: local neuron ids -> prepared operator weights."""

    ids: Tensor  # int64 global neuron ids, on this part's device
    weights: opw.ReluFFNWeights | opw.GatedFFNWeights | None  # None: no neuron here
    all_ids: Tensor  # int64 local 0..k-1 (dense mode)

    @property
    def size(self) -> int:
        return int(self.ids.numel())


def gather_part(f: ReluFFNWeights | GatedFFNWeights, ids: Tensor, device: torch.device,
            dtype: torch.dtype, with_bias: bool) -> _Part:
    ids_dev = ids.to(device)
    local = torch.arange(ids.numel(), device=device)
    if ids.numel() == 0:
        return _Part(ids_dev, None, local)
    src = ids.to(f.w2_t.device if isinstance(f, ReluFFNWeights) else f.w_down_t.device)

    def rows(w: Tensor) -> Tensor:
        return w.index_select(0, src).to(device=device, dtype=dtype).contiguous()

    def vec(b: Tensor | None, select: bool) -> Tensor | None:
        if b is None:
            return None
        b = b.index_select(0, src) if select else b
        return b.to(device=device, dtype=torch.float32).contiguous()

    if isinstance(f, ReluFFNWeights):
        w = opw.ReluFFNWeights(w1=rows(f.w1), b1=vec(f.b1, True), w2_t=rows(f.w2_t),
                               b2=vec(f.b2, False) if with_bias else None)
    else:
        if f.b_gate is not None or f.b_up is not None or f.b_down is not None:
            raise ValueError("hybrid FFN: gated FFNs with biases are not supported by the "
                             "sparse operators")
        w = opw.GatedFFNWeights(w_gate=rows(f.w_gate), w_up=rows(f.w_up),
                                w_down_t=rows(f.w_down_t), kind=f.kind.value)
    return _Part(ids_dev, w, local)


class HybridFFN:
    """The decoder's FFN for engine=hybrid (see the module docstring).

    placement: the Placement whose `gpu_neurons[l]` are the GPU-resident ids of layer l.
    predictors: an ActivePredictor (PredictorSet / oracle) giving per-row masks.
    active: auto (predictors if given, else oracle) | predictor | oracle (true activation
        from the layer's own input weights, computed densely on the GPU: the accuracy bound,
        NOT PowerInfer's cost) | dense (every neuron of each part).
    gpu_backend / cpu_backend: sparse operator backends (the tests use sparse_torch for both
        on the CPU; the engine uses sparse_cuda + sparse_cpu and never falls back).
    cpu_part: worker (the CPU part on a worker thread) | inline (on the calling thread,
        after the GPU part is issued).
    """

    def __init__(self, weights: DecoderWeights, placement: Any = None,
                 predictors: Any = None, active: str = "auto",
                 gpu_backend: str = "sparse_cuda", cpu_backend: str = "sparse_cpu",
                 cpu_dtype: str | None = None, cpu_threads: int | str = "auto",
                 time_gpu_part: bool = True, check: bool = False,
                 cpu_part: str = "worker") -> None:
        if placement is None:
            raise ValueError("engine=hybrid follows a placement: run it with solver=<name> and "
                             "hardware=<name> (the pipeline passes placement=...)")
        if active not in ACTIVE_MODES:
            raise ValueError(f"engine.ffn.active={active!r}; choose from {ACTIVE_MODES}")
        if cpu_part not in CPU_PART_MODES:
            raise ValueError(f"engine.ffn.cpu_part={cpu_part!r}; choose from {CPU_PART_MODES}")
        if active == "auto":
            active = "predictor" if predictors is not None else "oracle"
        if active == "predictor" and predictors is None:
            raise ValueError("engine.ffn.active=predictor needs predictors (predictor=fixed, "
                             "adaptive or oracle); or set engine.ffn.active=oracle|dense")
        n_layers, d_ffn = weights.n_layers, weights.layers[0].ffn.d_ffn
        if placement.n_layers != n_layers or placement.neurons_per_layer != d_ffn:
            raise ValueError(f"placement is for {placement.n_layers} layers x "
                             f"{placement.neurons_per_layer} neurons, the model has "
                             f"{n_layers} x {d_ffn}")
        self.weights, self.placement, self.active = weights, placement, active
        self.predictors = predictors
        self.check = check
        self.gpu_ops: SparseOps = get_backend(gpu_backend, fallback=False)
        self.cpu_ops: SparseOps = get_backend(cpu_backend, fallback=False)
        self.device = weights.device
        self.cpu_device = torch.device("cpu")
        cpu_dt = opw_dtype(cpu_dtype, weights.dtype)
        self.gpu_parts: list[_Part] = []
        self.cpu_parts: list[_Part] = []
        for i, layer in enumerate(weights.layers):
            gpu_ids = torch.as_tensor(placement.gpu_neurons[i], dtype=torch.int64)
            on_gpu = torch.zeros(d_ffn, dtype=torch.bool)
            on_gpu[gpu_ids] = True
            cpu_ids = torch.nonzero(~on_gpu).flatten()
            # the output bias joins the GPU part (or the CPU part when the GPU holds none)
            self.gpu_parts.append(gather_part(layer.ffn, gpu_ids, self.device, weights.dtype,
                                              with_bias=True))
            self.cpu_parts.append(gather_part(layer.ffn, cpu_ids, self.cpu_device, cpu_dt,
                                              with_bias=gpu_ids.numel() == 0))
        # the output bias of a layer with no GPU neuron, for calls with no active CPU neuron
        self.cpu_bias = [None if gpu.size else _bias_on(cpu, self.device, weights.dtype)
                         for gpu, cpu in zip(self.gpu_parts, self.cpu_parts, strict=True)]
        self.concurrent = self.device.type == "cuda"
        if active == "predictor" and self.concurrent:
            for module in getattr(predictors, "predictors", []):
                module.to(self.device)
        self.cpu_runner = CpuPartRunner(self.cpu_ops, self.device, _threads(cpu_threads),
                                        check=check, inline=cpu_part == "inline")
        self.calls = 0
        self._gpu_active: Tensor | int = 0  # GPU-only layers' share, counted on the device
        self.reset_timing(time_gpu_part)

    @property
    def cpu_part(self) -> str:
        """Where the CPU part runs (engine.ffn.cpu_part): worker | inline."""
        return "inline" if self.cpu_runner.inline else "worker"

    def reset_timing(self, time_gpu_part: bool = True) -> None:
        """Forget the decode-call timings (e.g. after a warm-up); `time_gpu_part`: record
        CUDA events around each decode call's GPU part from now on (two event records of
        host time per call: a benchmark's timed rounds leave them out)."""
        # CUDA events around each decode call's GPU part, read (synchronising) by metrics()
        self.time_gpu_part = time_gpu_part
        self._gpu_events: list[tuple[Any, Any]] = []
        self.cpu_runner.decode_seconds = 0.0
        self.decode_calls = 0

    # ---- active sets --------------------------------------------------------------------
    def _oracle(self, i: int, x: Tensor) -> Tensor:
        f = self.weights.layers[i].ffn
        if isinstance(f, ReluFFNWeights):
            h = torch.nn.functional.linear(x, f.w1, f.b1)
            return h > 0
        g = torch.nn.functional.linear(x, f.w_gate, f.b_gate) > 0
        if f.kind.value == "drelu":
            return g & (torch.nn.functional.linear(x, f.w_up, f.b_up) > 0)
        return g

    def _mask(self, i: int, x: Tensor) -> Tensor | None:
        """bool [rows, neurons] on x's device, or None (dense)."""
        if self.active == "dense":
            return None
        if self.active == "oracle":
            return self._oracle(i, x)
        return self.predictors.predict_mask(i, x).to(x.device)

    def rewind(self) -> None:
        """Restart a replayed predictor (each benchmark round does the same work)."""
        rewind = getattr(self.predictors, "rewind", None)
        if rewind is not None:
            rewind()

    # ---- the FFN ------------------------------------------------------------------------
    def __call__(self, layer_idx: int, x: Tensor, observer: FFNObserver | None = None) -> Tensor:
        gpu, cpu = self.gpu_parts[layer_idx], self.cpu_parts[layer_idx]
        mask = self._mask(layer_idx, x)
        # one row (decode at batch 1): the mask row itself, no reduction launched
        union = None if mask is None else mask[0] if mask.shape[0] == 1 else mask.any(dim=0)
        decode = x.shape[0] <= DECODE_ROWS
        # 2. x and the union to pinned host memory (copy stream), the CPU part on the worker
        job = self.cpu_runner.submit(cpu, x, union, decode) if cpu.size else None
        # 3. the GPU part, asynchronously, on the main stream (timed by CUDA events)
        events = self._gpu_start() if decode else None
        y = self._gpu_part(gpu, x, union, counted=job is not None)
        if events is not None:
            events[1].record()
        # 4-5. wait for the worker only; its y joins on the main stream (no GPU sync)
        if job is not None:
            y = self.cpu_runner.merge(job, y)
            if y is None:  # no GPU neuron and no active CPU neuron: the output bias alone
                y = self._bias_only(layer_idx, x)
        assert y is not None
        self.decode_calls += int(decode)
        self.calls += 1
        if observer is not None:
            computed = (torch.ones(x.shape[0], self.placement.neurons_per_layer,
                                   dtype=torch.bool, device=x.device) if union is None
                        else union.expand(x.shape[0], -1))
            observer.record(layer_idx, x, computed)
        return y

    def _gpu_start(self) -> tuple[Any, Any] | None:
        if (not self.concurrent or not self.time_gpu_part
                or len(self._gpu_events) >= MAX_TIMED_CALLS):
            return None
        events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        events[0].record()
        self._gpu_events.append(events)
        return events

    def _gpu_part(self, gpu: _Part, x: Tensor, union: Tensor | None,
                  counted: bool) -> Tensor | None:
        """The GPU part's y (None: no GPU neuron); `counted`: the worker counts its active
        neurons on the host (else a device-side count, no sync)."""
        if gpu.size == 0:
            return None
        if union is None:
            return self.gpu_ops.ffn(x, gpu.weights, gpu.all_ids, check=self.check)
        scores = union.index_select(0, gpu.ids).to(torch.float32)
        if not counted:
            self._gpu_active = self._gpu_active + scores.sum()
        return self.gpu_ops.ffn(x, gpu.weights, Threshold(scores, 0.5), check=self.check)

    def _bias_only(self, layer_idx: int, x: Tensor) -> Tensor:
        out = torch.zeros_like(x)
        b2 = self.cpu_bias[layer_idx]
        return out if b2 is None else out + b2

    # ---- reporting ----------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Measured over every call (warm-up included): the active-neuron load split."""
        if self.active == "dense":
            gpu = float(sum(p.size for p in self.gpu_parts))
            cpu = float(sum(p.size for p in self.cpu_parts))
        else:
            gpu = float(self._gpu_active) if isinstance(self._gpu_active, int) \
                else float(self._gpu_active.item())
            gpu += self.cpu_runner.gpu_active
            cpu = float(self.cpu_runner.active)
        total = gpu + cpu
        timed: list[float] = []
        if self._gpu_events:
            torch.cuda.synchronize(self.device)
            timed = [start.elapsed_time(end) for start, end in self._gpu_events]
        return {
            "hybrid_gpu_neuron_load_share": gpu / total if total > 0 else 0.0,
            "hybrid_gpu_neurons_per_call": gpu / max(self.calls, 1),
            "hybrid_cpu_neurons_per_call": cpu / max(self.calls, 1),
            "hybrid_cpu_ffn_ms_per_call": self.cpu_runner.seconds * 1e3 / max(self.calls, 1),
            # decode-shaped calls (<= DECODE_ROWS rows) since the last reset_timing(): the
            # GPU part's time on its stream (CUDA events) and the CPU part's wall time
            "hybrid_gpu_ffn_ms_per_decode_call": sum(timed) / len(timed) if timed else 0.0,
            "hybrid_cpu_ffn_ms_per_decode_call":
                self.cpu_runner.decode_seconds * 1e3 / max(self.decode_calls, 1),
            # the CPU part's thread count (measured choice with cpu_threads=auto; 0: still
            # measuring)
            "hybrid_cpu_threads": float(self.cpu_runner.threads.chosen or 0)
            if any(p.size for p in self.cpu_parts) else 0.0,
            "hybrid_gpu_resident_neuron_share": float(sum(p.size for p in self.gpu_parts))
            / max(self.placement.n_layers * self.placement.neurons_per_layer, 1),
        }


def _bias_on(part: _Part, device: torch.device, dtype: torch.dtype) -> Tensor | None:
    b2 = getattr(part.weights, "b2", None)
    return None if b2 is None else b2.to(device=device, dtype=dtype)


def _threads(value: int | str) -> int | str:
    """engine.ffn.cpu_threads: 'auto' or a count (Hydra may hand a count as a string)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def opw_dtype(name: str | None, default: torch.dtype) -> torch.dtype:
    from powerbench.engine.base import torch_dtype

    return torch_dtype(name, default)


class HybridEngine(DecoderEngine):
    """Our decoder loop on the GPU (attention, KV cache, residual stream) with `HybridFFN`."""

    def __init__(self, cfg: DecoderEngineConfig | None = None) -> None:
        super().__init__(cfg if cfg is not None else HybridEngineConfig())

    def build_decoder(self, loaded: LoadedModel, observer: FFNObserver | None = None,
                      **context: Any) -> Decoder:
        require_cuda()
        if self.device is not None and torch.device(self.device).type != "cuda":
            raise ValueError(f"engine=hybrid runs attention on the GPU: engine.device must be "
                             f"cuda, got {self.device!r}")
        return super().build_decoder(loaded, observer=observer, **context)
