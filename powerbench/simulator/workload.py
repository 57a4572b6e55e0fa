"""The FFN work of each forward pass: how many neurons each device computes, per layer.

Decode step s processes B tokens (one per batch row). Its tokens are B consecutive trace
tokens, `(offset + s * B + b) mod T`, so per-token variance comes straight from the
profile's per-token masks (measured, or drawn from a synthetic profile), and for B > 1
the kernels compute the UNION of the rows' active neurons (powerbench.ops convention).
A profile without traces falls back to the expectation from neuron frequencies p:
E|union over r rows| = sum over neurons of 1 - (1 - p)^r.

Token overlap: a synthetic profile draws its trace tokens INDEPENDENTLY, but consecutive
real tokens share active neurons, so a batch's union grows more slowly. With
`overlap` (the measured lag-1 autocorrelation rho of a neuron's activity, by the layer's
active fraction: SimulatorConfig.token_overlap, powerbench.profiling.token_overlap) each
device's union over a group of r > 1 independent trace tokens is scaled by

    sum_j u(p_j, r, rho) / sum_j u(p_j, r, 0),   u = 1 - (1 - p)(1 - p (1 - rho))^(r - 1)

over the device's neurons j (the Markov chain's expected union over the independent
one), and the no-trace expectation uses u(p, r, rho) directly. Measured traces are real
consecutive tokens and are used as they are. Per-row work (FLOPs with token_skip) is
unchanged: overlap changes which neurons repeat, not how many each token has.

Sparse mode computes the union (times the predictor's predicted / true ratio, capped at
what the device holds); dense mode computes every neuron the device holds (MoE: every
neuron of the experts routed to any row).

Bytes follow the union (each computed neuron's weights are read once per pass); FLOPs
follow `*_token_computed`, the (neuron, row) pairs computed. Dense mode: every computed
neuron for every row. Sparse mode: each row's own predicted neurons, as PowerInfer's
neuron-aware operators skip a (neuron, token) pair whose predictor score is below the
threshold (`ggml_compute_forward_mul_mat_sparse`: one predictor score per row and token);
`SimulatorConfig.token_skip=false` charges the union for every row instead (our own
`powerbench.ops` kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from powerbench.model.spec import ModelSpec
from powerbench.profiling.activation_profile import ActivationProfile, pack_masks, unpack_masks
from powerbench.profiling.token_overlap import union_fraction
from powerbench.simulator.config import ComputeMode, TokenOverlapConfig
from powerbench.solver.placement import Placement


@dataclass
class FFNWork:
    """Arrays [passes, layers]: neurons active (union) and computed on each device, and
    the (neuron, row) pairs each device computes (its FLOPs)."""

    gpu_active: np.ndarray
    cpu_active: np.ndarray
    gpu_computed: np.ndarray
    cpu_computed: np.ndarray
    gpu_token_computed: np.ndarray
    cpu_token_computed: np.ndarray

    @property
    def n_passes(self) -> int:
        return int(self.gpu_active.shape[0])

    def take(self, index: np.ndarray) -> FFNWork:
        """Rows `index` (decode steps that replay the same token group)."""
        return FFNWork(*(getattr(self, f.name)[index] for f in fields(self)))

    def gpu_load_share(self) -> float:
        """Share of active (union) neurons that live on the GPU: the neuron-load split."""
        total = float(self.gpu_active.sum() + self.cpu_active.sum())
        return float(self.gpu_active.sum()) / total if total > 0 else 0.0

    def gpu_compute_share(self) -> float:
        """Share of computed neurons computed on the GPU (dense: everything it holds)."""
        total = float(self.gpu_computed.sum() + self.cpu_computed.sum())
        return float(self.gpu_computed.sum()) / total if total > 0 else 0.0


def token_groups(n_trace: int, rows: int, n_passes: int, offset: int = 0) -> np.ndarray:
    """int [n_passes, rows] trace indices: pass g takes rows consecutive tokens from
    offset + g * rows, wrapping around the trace."""
    if n_trace <= 0:
        raise ValueError("profile has no trace tokens")
    start = offset + np.arange(n_passes)[:, None] * rows
    return (start + np.arange(rows)[None, :]) % n_trace


def decode_passes(n_trace: int, batch: int, n_steps: int) -> tuple[int, np.ndarray]:
    """(distinct groups to evaluate, step -> group index): groups repeat with period
    T / gcd(T, B) steps, so at most that many unions are ever computed."""
    period = n_trace // math.gcd(n_trace, batch) if n_trace > 0 else 1
    distinct = min(n_steps, period)
    return distinct, np.arange(n_steps) % max(distinct, 1)


def _moe_routed(union: np.ndarray, n_experts: int) -> np.ndarray:
    """bool [G, N]: neurons of every expert with any active neuron in the union."""
    g, n = union.shape
    routed = union.reshape(g, n_experts, n // n_experts).any(axis=2)
    return np.repeat(routed, n // n_experts, axis=1)


def _dense_counts(spec: ModelSpec, union: np.ndarray | None, gpu: np.ndarray,
                  packed_gpu: np.ndarray, n_passes: int,
                  rows: int) -> tuple[np.ndarray | float, np.ndarray | float]:
    """(on GPU, on CPU) neurons a dense pass computes: every neuron, or for MoE every
    neuron of the routed experts (those with an active neuron in the pass's bit-packed
    `union`, or without traces the expected share of experts `rows` tokens route to)."""
    experts = max(spec.n_experts, 1)
    if experts == 1:
        gpu_total = float(gpu.sum())
        return gpu_total, float(gpu.size) - gpu_total
    if union is not None:
        routed = _moe_routed(unpack_masks(union, gpu.size), experts)
        return _side_counts(pack_masks(routed), packed_gpu)
    share = 1.0 - (1.0 - spec.experts_per_token / experts) ** rows
    dense = np.full((n_passes, gpu.size), share)
    on_gpu = dense[:, gpu].sum(axis=1)
    return on_gpu, dense.sum(axis=1) - on_gpu


def _side_counts(packed: np.ndarray, gpu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(on GPU, on CPU) counts of a mask's rows, bit-packed as `pack_masks` packs them
    (uint8 [G, ceil(N / 8)]; `gpu`: bit-packed [ceil(N / 8)]): population counts, 5x
    faster than counting bools."""
    on_gpu = np.bitwise_count(packed & gpu).sum(axis=1, dtype=np.int64)
    total = np.bitwise_count(packed).sum(axis=1, dtype=np.int64)
    return on_gpu.astype(np.float64), (total - on_gpu).astype(np.float64)


def overlap_scale(p: np.ndarray, on_side: np.ndarray, rows: int, rho: float) -> float:
    """Expected union of `rows` overlapping tokens over that of independent ones, for the
    neurons `on_side` (1 when rho = 0, rows = 1 or no neuron can fire)."""
    if rho <= 0.0 or rows <= 1:
        return 1.0
    independent = float(union_fraction(p[on_side], rows).sum())
    return (float(union_fraction(p[on_side], rows, rho).sum()) / independent
            if independent > 0 else 1.0)


def ffn_work(spec: ModelSpec, profile: ActivationProfile, placement: Placement,
             mode: ComputeMode, groups: np.ndarray | None, rows: int,
             ratio: np.ndarray | None = None, token_skip: bool = False,
             overlap: TokenOverlapConfig | None = None) -> FFNWork:
    """Per pass (row of `groups`, or one expected pass when the profile has no traces) and
    layer: union of active neurons and computed neurons on each device.

    `rows`: tokens per pass; `ratio`: per-layer predicted / true active (sparse mode),
    default 1; `token_skip`: sparse FLOPs count each row's own neurons; `overlap`: the
    token-to-token overlap applied to independently drawn (synthetic) traces (module doc).
    """
    independent_trace = profile.source == "synthetic"
    overlap = overlap or TokenOverlapConfig()
    n_layers = spec.n_layers
    if profile.n_layers != n_layers or placement.n_layers != n_layers:
        raise ValueError(f"{spec.name}: profile has {profile.n_layers} layers, placement "
                         f"{placement.n_layers}, model {n_layers}")
    ratio = np.ones(n_layers) if ratio is None else np.asarray(ratio, dtype=np.float64)
    n_passes = 1 if groups is None else groups.shape[0]
    shape = (n_passes, n_layers)
    gpu_act, cpu_act = np.zeros(shape), np.zeros(shape)
    gpu_cmp, cpu_cmp = np.zeros(shape), np.zeros(shape)
    gpu_tok, cpu_tok = np.zeros(shape), np.zeros(shape)  # (neuron, row) pairs active
    for index, layer in enumerate(profile.layers):
        gpu = placement.gpu_mask(index)
        gpu_total = float(gpu.sum())
        cpu_total = float(gpu.size) - gpu_total
        p = np.clip(layer.frequency, 0.0, 1.0)
        rho = overlap.at(layer.active_fraction)
        packed_gpu = pack_masks(gpu)
        if groups is not None:
            union = layer.trace_unions(groups)  # bit-packed [G, N]
            assert union is not None and layer.trace is not None
            gpu_act[:, index], cpu_act[:, index] = _side_counts(union, packed_gpu)
            if independent_trace and rho > 0:
                width = groups.shape[1]  # the trace tokens the union was taken over
                gpu_act[:, index] *= overlap_scale(p, gpu, width, rho)
                cpu_act[:, index] *= overlap_scale(p, ~gpu, width, rho)
            per_token_gpu, per_token_cpu = _side_counts(layer.trace, packed_gpu)
            gpu_tok[:, index] = per_token_gpu[groups].sum(axis=1)
            cpu_tok[:, index] = per_token_cpu[groups].sum(axis=1)
        else:  # expectation over independent tokens
            union = None
            hit = union_fraction(p, rows, rho)
            gpu_act[:, index] = hit[gpu].sum()
            cpu_act[:, index] = hit.sum() - hit[gpu].sum()
            gpu_tok[:, index] = rows * p[gpu].sum()
            cpu_tok[:, index] = rows * (p.sum() - p[gpu].sum())
        if mode is ComputeMode.dense:
            gpu_cmp[:, index], cpu_cmp[:, index] = _dense_counts(
                spec, union, gpu, packed_gpu, n_passes, rows)
        else:
            gpu_cmp[:, index] = np.minimum(gpu_act[:, index] * ratio[index], gpu_total)
            cpu_cmp[:, index] = np.minimum(cpu_act[:, index] * ratio[index], cpu_total)
    if mode is ComputeMode.dense or not token_skip:
        gpu_tok, cpu_tok = gpu_cmp * rows, cpu_cmp * rows
    else:
        gpu_tok = np.minimum(gpu_tok * ratio, gpu_cmp * rows)
        cpu_tok = np.minimum(cpu_tok * ratio, cpu_cmp * rows)
    return FFNWork(gpu_act, cpu_act, gpu_cmp, cpu_cmp, gpu_tok, cpu_tok)
