"""The per-token cost model: one forward pass, layer by layer, vectorised over passes.

For each layer l (home device h = where its attention and KV cache live; the residual
stream is merged there):

    attention  on h:  weights (Q, K, V, O) + the K and V of every context token of every row;
                      FLOPs 2 x params x rows (GEMM rate) + 4 x heads x head_dim x (query,
                      key) pairs (the unit's attention-score rate, if it has one)
    predictor  on its device (sparse mode): its parameter bytes, 2 x params x rows FLOPs
    FFN        each device computes its own neurons (FFNWork): neurons x M_n bytes,
               2 x params_per_neuron x (neuron, row) pairs FLOPs (int4 on the accelerator's
               sparse operators: the down column at efficiency.int4_axpy of the input
               rows' rate, CostModel.int4_axpy_scale; the CPU's sparse operator at
               most threads x cpu_sparse_thread_gb_s when set (a thread-bound row
               gather); + cpu_sparse_call_us per
               sparse CPU call: the operator's fixed cost beyond one dispatch; on the
               accelerator the sparse call's launch-bound side is ops x launch +
               gpu_sparse_call_us, its binding's host time). When both devices hold neurons
               of the layer they run CONCURRENTLY:
                   t_ffn = max(t_home, t_link(x + mask) + t_other + t_link(y)) + T_sync
               (the other device needs the layer input and the predicted mask, and sends its
               partial sum back: ONE synchronisation plus the activation transfer; the
               transfers sit on the other device's branch, with the round trip's fixed cost
               beyond that synchronisation: cfg.hybrid_roundtrip_us - T_sync, the worker
               threads' wake-up and the copies' own synchronisations, less
               cfg.hybrid_host_us, the home host's own part of the trip, which is charged
               in series with both branches (the host issues it around its launches); with
               cfg.hybrid_merges = m host merges per layer, m round trips and the d_ffn-wide
               activation both ways m - 1 more times, all on that branch, a lower bound of
               the staged max(GPU up, CPU up) + max(GPU down, CPU down)). A layer whose FFN lives only on
               the other device pays the same, without anything to overlap. On unified
               memory both units read one DRAM: t_ffn >= (all FFN bytes) / its bandwidth.
    transition if layer l + 1 (or the output projection) lives elsewhere: T_sync + x over
               the link (llama.cpp's layer-offload boundary)

Around the layers: the embedding lookup, the output projection, and on an accelerator one
synchronisation plus the logits copied to the host for sampling. Device times are
rooflines (powerbench.simulator.rates). Components that sit on the critical path sum to
the pass time exactly; FFN busy times of each device are reported beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.model.spec import ModelSpec, bytes_per_param
from powerbench.simulator.config import ComputeMode, OpCounts, SimulatorConfig
from powerbench.simulator.rates import (
    CPU,
    GPU,
    DeviceRates,
    LinkRates,
    cpu_rates,
    gpu_rates,
    host_threads,
    link_rates,
)
from powerbench.simulator.workload import FFNWork
from powerbench.solver.placement import Placement

LOGIT_BYTES = 4.0  # fp32 logits copied to the host


@dataclass(frozen=True)
class PassShape:
    """Shape of forward passes (arrays over passes).

    rows: token rows through every matrix product (decode: B; prefill: P x B).
    kv_tokens: K/V token-rows each layer reads (decode: context x B; prefill: P x B).
    score_pairs: (query, key) pairs per head (decode: context x B; prefill: P(P+1)/2 x B).
    out_rows: rows whose logits are computed (B: the last position of each row).
    """

    rows: int
    kv_tokens: np.ndarray
    score_pairs: np.ndarray
    out_rows: int

    @classmethod
    def decode(cls, context: np.ndarray, batch: int) -> PassShape:
        ctx = np.asarray(context, dtype=np.float64)
        return cls(batch, ctx * batch, ctx * batch, batch)

    @classmethod
    def prefill(cls, prompt: int, batch: int) -> PassShape:
        pairs = np.array([prompt * (prompt + 1) / 2 * batch], dtype=np.float64)
        return cls(prompt * batch, np.array([float(prompt * batch)]), pairs, batch)


@dataclass
class PassCosts:
    """Seconds per pass. `layer[name]` are [passes, layers]; `token[name]` are [passes]."""

    layer: dict[str, np.ndarray] = field(default_factory=dict)
    token: dict[str, np.ndarray] = field(default_factory=dict)
    busy: dict[str, np.ndarray] = field(default_factory=dict)  # [passes, layers], off-path
    cpu_bound: np.ndarray | None = None  # bool [passes, layers]: hybrid FFN waited on the CPU
    bytes_read: dict[str, np.ndarray] = field(default_factory=dict)  # device -> [passes]

    @property
    def total(self) -> np.ndarray:
        """Critical-path seconds of each pass."""
        parts = [v.sum(axis=1) for v in self.layer.values()] + list(self.token.values())
        return np.sum(parts, axis=0)

    def component_totals(self) -> dict[str, float]:
        out = {k: float(v.sum()) for k, v in self.layer.items()}
        out.update({k: float(v.sum()) for k, v in self.token.items()})
        return out


class CostModel:
    """Costs of `spec` placed by `placement` on `hardware` (see module docstring)."""

    def __init__(self, spec: ModelSpec, placement: Placement, hardware: HardwareProfile,
                 cfg: SimulatorConfig, predictor_bytes: np.ndarray | None = None) -> None:
        if placement.n_layers != spec.n_layers:
            raise ValueError(f"placement has {placement.n_layers} layers, {spec.name} has "
                             f"{spec.n_layers}")
        self.spec, self.placement, self.hw, self.cfg = spec, placement, hardware, cfg
        self.sparse = cfg.mode is ComputeMode.sparse
        wb = bytes_per_param(placement.weight_dtype)
        self.weight_bytes = wb
        self.neuron_bytes = spec.neuron_bytes(placement.weight_dtype)
        self.attn_bytes = spec.attn_bytes_per_layer(placement.weight_dtype)
        self.kv_token_bytes = 2 * spec.n_kv_heads * spec.head_dim * cfg.kv_bytes_per_value
        self.x_bytes = spec.d_model * cfg.activation_bytes  # per row
        self.lm_head_bytes = spec.vocab_size * spec.d_model * wb
        n = spec.n_layers
        pred = np.zeros(n) if predictor_bytes is None else np.asarray(predictor_bytes, float)
        self.predictor_bytes = np.broadcast_to(pred, (n,)).astype(np.float64)
        self.dev: dict[str, DeviceRates] = {
            CPU: cpu_rates(hardware, cfg, str(placement.weight_dtype))}
        gpu = gpu_rates(hardware)
        if gpu is not None:
            self.dev[GPU] = gpu
        self.link: LinkRates | None = link_rates(hardware)
        # unified memory (phones): concurrent CPU + accelerator reads share the tier's
        # effective bandwidth (oneplus12: 59.6 GB/s both vs 43.9 CPU-only, 56 NPU-only)
        self.shared_bw = hardware.memory_of(hardware.cpu).effective_bw if hardware.unified \
            else None
        self.ops: dict[str, OpCounts] = {CPU: cfg.cpu_ops, GPU: cfg.gpu_ops}
        self.int4 = str(placement.weight_dtype) == "int4"
        self.cpu_sparse_cap = self._cpu_sparse_thread_cap(hardware, cfg)
        self.gpu_counts = placement.gpu_counts.astype(np.float64)
        # a hybrid layer's round trip beyond the one synchronisation charged as `sync` and
        # the home host's own part of it (`host_serial_s`, charged in series)
        self.host_serial_s = cfg.hybrid_merges * (cfg.hybrid_host_us or 0.0) * 1e-6
        self.roundtrip_extra_s = 0.0
        if cfg.hybrid_merges < 1:
            raise ValueError(f"simulator.hybrid_merges is {cfg.hybrid_merges}: it must be >= 1")
        if self.link is not None:
            trip_s = (cfg.hybrid_roundtrip_us * 1e-6 if cfg.hybrid_roundtrip_us is not None
                      else self.link.sync_s)
            self.roundtrip_extra_s = max(cfg.hybrid_merges * trip_s - self.link.sync_s
                                         - self.host_serial_s, 0.0)
        # each merge after the first moves the d_ffn-wide activation to the host and back
        self.merge_bytes = (cfg.hybrid_merges - 1) * spec.neurons_per_layer * cfg.activation_bytes
        self.cpu_counts = placement.neurons_per_layer - self.gpu_counts
        self._check_devices()

    def _check_devices(self) -> None:
        p = self.placement
        used = set(p.attn_device) | set(p.kv_device) | {p.embed_device, p.lm_head_device}
        used |= {d for d in p.predictor_device if d is not None}
        if self.gpu_counts.sum() > 0:
            used.add(GPU)
        if GPU in used and GPU not in self.dev:
            raise ValueError(f"placement {p.solver!r} uses an accelerator but hardware "
                             f"{self.hw.name!r} has none")
        if p.attn_device != p.kv_device:
            raise ValueError("the cost model assumes each layer's KV cache lives with its "
                             "attention (placement.kv_device == attn_device)")

    @property
    def int4_axpy_scale(self) -> float:
        """Time of an int4 neuron on the accelerator's sparse operators over the int4 rate:
        its down column (1 of the FFN's matrices) runs through the axpy at
        cfg.efficiency.int4_axpy of the rate the input rows (MMVQ class) get
        (PowerInfer's public code: dequantize_mul_mat_axpy_sparse_pro<Q4_0>)."""
        matrices = self.spec.ffn_kind.n_matrices
        return (matrices - 1 + 1.0 / self.cfg.efficiency.int4_axpy) / matrices

    def efficiency(self, dev: str, sparse: bool = False, weights: bool = True) -> float:
        """Achieved share of `dev`'s bandwidth for this kind of kernel (cfg.efficiency);
        `weights`: the model's weights (int4 factor applies), else fp16 data (KV, predictors)."""
        value = self.cfg.efficiency.factor(dev, sparse, weights and self.int4)
        return min(value, self.cpu_sparse_cap) if dev == CPU and sparse else value

    def _cpu_sparse_thread_cap(self, hardware: HardwareProfile, cfg: SimulatorConfig) -> float:
        """The share of the host's bandwidth a thread-bound sparse operator reaches:
        threads x cfg.cpu_sparse_thread_gb_s / bandwidth (inf when unset)."""
        rate = cfg.cpu_sparse_thread_gb_s
        if rate is None:
            return math.inf
        if rate <= 0:
            raise ValueError(f"simulator.cpu_sparse_thread_gb_s is {rate}: it must be > 0 "
                             "(null: bandwidth-bound only)")
        threads = cfg.cpu_threads or host_threads(hardware.cpu)
        return threads * rate * 1e9 / self.dev[CPU].bandwidth

    # ---- pieces ---------------------------------------------------------------------------
    def switch(self, src: str, dst: str, nbytes: float | np.ndarray) -> np.ndarray:
        """Moving the residual stream from src to dst: one sync + the bytes over the link."""
        if src == dst:
            return np.zeros_like(np.asarray(nbytes, dtype=np.float64))
        assert self.link is not None
        return self.link.sync_s + self.link.transfer(nbytes, dst)

    def attention(self, layer: int, shape: PassShape) -> np.ndarray:
        s = self.spec
        dev = self.placement.attn_device[layer]
        nbytes = (self.attn_bytes / self.efficiency(dev)
                  + shape.kv_tokens * self.kv_token_bytes / self.efficiency(dev, weights=False))
        rates = self.dev[dev]
        flops = (2.0 * s.attn_params_per_layer * shape.rows
                 + rates.score_flops_equivalent(4.0 * s.n_heads * s.head_dim * shape.score_pairs))
        return rates.time(nbytes, flops, self.ops[dev].attention)

    def predictor(self, layer: int, rows: int) -> tuple[str, float]:
        dev = self.placement.predictor_device[layer] or self.placement.attn_device[layer]
        nbytes = float(self.predictor_bytes[layer])
        if nbytes <= 0:
            return dev, 0.0
        params = nbytes / 2.0  # predictors are stored in fp16
        return dev, float(self.dev[dev].time(nbytes / self.efficiency(dev, weights=False),
                                             2.0 * params * rows, self.ops[dev].predictor))

    def ffn_device(self, dev: str, neurons: np.ndarray, token_neurons: np.ndarray) -> np.ndarray:
        """FFN time on `dev`: `neurons` read once (the pass's union), `token_neurons`
        (neuron, row) pairs computed (FFNWork)."""
        ops = self.ops[dev].ffn_sparse if self.sparse else self.ops[dev].ffn_dense
        flops = 2.0 * self.spec.params_per_neuron * token_neurons
        nbytes = neurons * self.neuron_bytes / self.efficiency(dev, self.sparse)
        if self.sparse and self.int4 and dev == GPU:
            nbytes = nbytes * self.int4_axpy_scale
        t = self.dev[dev].time(nbytes, flops, ops)
        if self.sparse and dev == CPU:
            call_us = self.cfg.cpu_sparse_call_us
            t = t + (call_us * 1e-6 if call_us is not None else self.dev[CPU].sparse_call_s)
        if self.sparse and dev == GPU and self.cfg.gpu_sparse_call_us:
            # the call's host issue time: its launches plus the binding's own host work
            t = np.maximum(t, ops * self.dev[GPU].op_s + self.cfg.gpu_sparse_call_us * 1e-6)
        return t

    def lm_head(self, shape: PassShape) -> tuple[str, float]:
        dev = self.placement.lm_head_device
        flops = 2.0 * self.spec.vocab_size * self.spec.d_model * shape.out_rows
        return dev, float(self.dev[dev].time(self.lm_head_bytes / self.efficiency(dev), flops,
                                             self.ops[dev].lm_head))

    def host_overhead(self, n_pass: int) -> np.ndarray:
        """The serving engine's non-overlapped host time per pass (cfg.host_layer_us per
        layer + cfg.host_pass_us)."""
        us = self.cfg.host_layer_us * self.spec.n_layers + self.cfg.host_pass_us
        return np.full(n_pass, us * 1e-6)

    # ---- one decode-style pass --------------------------------------------------------------
    def forward(self, work: FFNWork, shape: PassShape) -> PassCosts:
        """Costs of work.n_passes forward passes of `shape` (decode steps, or a prompt)."""
        p, n_layers = self.placement, self.spec.n_layers
        n_pass = work.n_passes
        if shape.kv_tokens.shape != (n_pass,):
            raise ValueError(f"shape has {shape.kv_tokens.shape} passes, work {n_pass}")
        zeros = np.zeros((n_pass, n_layers))
        layer = {k: zeros.copy() for k in ("attention@gpu", "attention@cpu", "predictor@gpu",
                                           "predictor@cpu", "ffn", "sync", "transition")}
        busy = {k: zeros.copy() for k in ("ffn@gpu", "ffn@cpu", "ffn_link")}
        cpu_bound = np.zeros((n_pass, n_layers), dtype=bool)
        read = {GPU: np.zeros(n_pass), CPU: np.zeros(n_pass)}
        x_bytes = self.x_bytes * shape.rows
        token: dict[str, np.ndarray] = {}

        cur = p.embed_device
        embed_bytes = shape.rows * self.spec.d_model * self.weight_bytes  # one table row each
        token["embedding"] = np.full(n_pass, float(self.dev[cur].time(embed_bytes, 0.0, 1)))
        read[cur] += embed_bytes
        for i in range(n_layers):
            home = p.attn_device[i]
            layer["transition"][:, i] = self.switch(cur, home, x_bytes)
            cur = home
            layer[f"attention@{home}"][:, i] = self.attention(i, shape)
            read[home] += self.attn_bytes + shape.kv_tokens * self.kv_token_bytes
            if self.sparse:
                dev, t = self.predictor(i, shape.rows)
                layer[f"predictor@{dev}"][:, i] = t + float(self.switch(home, dev, x_bytes))
                read[dev] += self.predictor_bytes[i]
            self._ffn(i, home, work, shape, layer, busy, cpu_bound, read)
        token["transition_out"] = self.switch(cur, p.lm_head_device, x_bytes) * np.ones(n_pass)
        dev, t = self.lm_head(shape)
        read[dev] += self.lm_head_bytes
        token[f"lm_head@{dev}"] = np.full(n_pass, t)
        token["logits_out"] = np.full(n_pass, float(
            self.switch(dev, CPU, self.spec.vocab_size * shape.out_rows * LOGIT_BYTES)))
        token["host_overhead"] = self.host_overhead(n_pass)
        return PassCosts(layer=layer, token=token, busy=busy, cpu_bound=cpu_bound,
                         bytes_read=read)

    def _ffn(self, i: int, home: str, work: FFNWork, shape: PassShape,
             layer: dict[str, np.ndarray], busy: dict[str, np.ndarray],
             cpu_bound: np.ndarray, read: dict[str, np.ndarray]) -> None:
        computed = {GPU: work.gpu_computed[:, i], CPU: work.cpu_computed[:, i]}
        pairs = {GPU: work.gpu_token_computed[:, i], CPU: work.cpu_token_computed[:, i]}
        holds = {GPU: self.gpu_counts[i] > 0, CPU: self.cpu_counts[i] > 0}
        times = {}
        for dev in (GPU, CPU):
            if holds[dev]:
                times[dev] = self.ffn_device(dev, computed[dev], pairs[dev])
                busy[f"ffn@{dev}"][:, i] = times[dev]
                read[dev] += computed[dev] * self.neuron_bytes
        other = CPU if home == GPU else GPU
        t_home = times.get(home, 0.0)
        if not holds[other]:
            layer["ffn"][:, i] = t_home
            return
        assert self.link is not None
        rows = shape.rows
        # the other device needs x and (sparse) the predicted mask, one byte per neuron
        mask_bytes = (self.cpu_counts[i] if other == CPU else self.gpu_counts[i]) \
            if self.sparse else 0.0
        to_other = self.link.transfer((self.x_bytes + self.merge_bytes) * rows + mask_bytes,
                                      other)
        back = self.link.transfer((self.x_bytes + self.merge_bytes) * rows, home)
        t_other = to_other + times[other] + back + self.roundtrip_extra_s
        busy["ffn_link"][:, i] = to_other + back + self.roundtrip_extra_s
        ffn = self.host_serial_s + np.maximum(t_home, t_other)
        if self.shared_bw is not None:  # one DRAM feeds both units: bytes share its bandwidth
            both = (computed[GPU] + computed[CPU]) * self.neuron_bytes / self.shared_bw
            ffn = np.maximum(ffn, both)
        layer["ffn"][:, i] = ffn
        layer["sync"][:, i] = self.link.sync_s
        trip = to_other + back + self.roundtrip_extra_s
        cpu_branch = times.get(CPU, 0.0) + (trip if other == CPU else 0.0)
        gpu_branch = times.get(GPU, 0.0) + (trip if other == GPU else 0.0)
        cpu_bound[:, i] = cpu_branch > gpu_branch
