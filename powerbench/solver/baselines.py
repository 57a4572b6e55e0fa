"""Dense baselines: llama.cpp's layer offload (`-ngl`), everything on the GPU, on the CPU.

No predictors (dense execution); a layer's KV cache lives with its attention.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from powerbench.hardware.hardware_profile import GB
from powerbench.solver.config import (
    AllCPUConfig,
    AllGPUConfig,
    LayerOffloadConfig,
    SolverConfig,
)
from powerbench.solver.placement import (
    CPU,
    GPU,
    DeviceBytes,
    Placement,
    PlacementInfeasibleError,
    SolverStats,
)
from powerbench.solver.problem import (
    ByteModel,
    PlacementProblem,
    byte_model,
    check_capacity,
    resolve_context,
)
from powerbench.solver.sparse import counts_objective, prefix_sums


def _what(name: str, problem: PlacementProblem) -> str:
    return f"{name}: {problem.spec.name} ({problem.weight_dtype.value}) on {problem.hardware.name}"


def _layer_bytes(bm: ByteModel) -> float:
    return bm.attn + bm.kv + bm.ffn_layer


def _whole_layers(name: str, c: SolverConfig, problem: PlacementProblem, bm: ByteModel,
                  on_gpu: np.ndarray, lm_head_gpu: bool, embed_gpu: bool,
                  start: float) -> Placement:
    """A Placement where each layer is entirely on one device."""
    n_gpu = int(on_gpu.sum())
    n_cpu = bm.n_layers - n_gpu
    emb_gpu = (bm.lm_head if lm_head_gpu else 0.0) + (bm.embed_in if embed_gpu else 0.0)
    emb_cpu = (0.0 if lm_head_gpu else bm.lm_head) + (0.0 if embed_gpu else bm.embed_in)
    any_gpu = n_gpu > 0 or emb_gpu > 0
    gpu = DeviceBytes(ffn=n_gpu * bm.ffn_layer, attention=n_gpu * bm.attn,
                      kv_cache=n_gpu * bm.kv, embeddings=emb_gpu,
                      buffers=bm.gpu_buffer if any_gpu else 0.0)
    cpu = DeviceBytes(ffn=n_cpu * bm.ffn_layer, attention=n_cpu * bm.attn,
                      kv_cache=n_cpu * bm.kv, embeddings=emb_cpu, buffers=bm.cpu_buffer)
    check_capacity(gpu, cpu, bm, _what(name, problem))
    all_ids = np.arange(bm.neurons, dtype=np.int64)
    ids = [all_ids if g else np.zeros(0, dtype=np.int64) for g in on_gpu]
    counts = np.where(on_gpu, bm.neurons, 0)
    devices = [GPU if g else CPU for g in on_gpu]
    stats = SolverStats(solve_time_s=time.perf_counter() - start,
                        objective=counts_objective(prefix_sums(problem), counts), gap=0.0,
                        backend="closed_form", extra={"gpu_layers": n_gpu})
    return Placement(
        solver=name, model=problem.spec.name, hardware=problem.hardware.name,
        weight_dtype=problem.weight_dtype.value, context=resolve_context(c, problem),
        neurons_per_layer=bm.neurons, gpu_neurons=ids, attn_device=devices,
        kv_device=list(devices), predictor_device=[None] * bm.n_layers,
        embed_device=GPU if (embed_gpu or (bm.embed_in == 0 and lm_head_gpu)) else CPU,
        lm_head_device=GPU if lm_head_gpu else CPU,
        min_gpu_neurons=np.zeros(bm.n_layers, dtype=np.int64), gpu=gpu, cpu=cpu, stats=stats,
    )


def solve_layer_offload(cfg: LayerOffloadConfig, problem: PlacementProblem) -> Placement:
    """llama.cpp `-ngl N`: layers i >= n_layer - N on the GPU (or the first N with
    `from_end: false`), whole (attention, KV cache, FFN); the output projection joins them
    once every layer is on the GPU and it still fits; token embeddings stay on the CPU."""
    start = time.perf_counter()
    c = cfg
    bm = byte_model(c, problem)
    what = _what("layer_offload", problem)
    per_layer = _layer_bytes(bm)
    if not bm.has_gpu:
        fit = 0
        avail = 0.0
    else:
        if bm.unified:  # shared pool: the host's share stays reserved
            avail = bm.cpu_capacity - bm.cpu_buffer - bm.gpu_buffer - bm.embed_in - bm.lm_head
        else:
            avail = bm.gpu_capacity - bm.gpu_buffer
        fit = int(min(max(avail, 0.0) // per_layer, bm.n_layers))
    n_gpu = fit if c.n_gpu_layers is None else int(c.n_gpu_layers)
    if not 0 <= n_gpu <= bm.n_layers:
        raise ValueError(f"{what}: n_gpu_layers must be in [0, {bm.n_layers}], got {n_gpu}")
    if n_gpu > fit:
        raise PlacementInfeasibleError(
            "GPU", n_gpu * per_layer + bm.gpu_buffer, avail + bm.gpu_buffer,
            f"{what}: {n_gpu} layers of {per_layer / GB:.3f} GB do not fit; at most {fit} do")
    on_gpu = np.zeros(bm.n_layers, dtype=bool)
    if n_gpu:
        if c.from_end:
            on_gpu[bm.n_layers - n_gpu:] = True
        else:
            on_gpu[:n_gpu] = True
    left = avail - n_gpu * per_layer
    lm_gpu = bool(c.lm_head_on_gpu and n_gpu == bm.n_layers and bm.lm_head <= left
                  and not bm.unified)
    return _whole_layers("layer_offload", c, problem, bm, on_gpu, lm_gpu, False, start)


def solve_all_gpu(cfg: AllGPUConfig, problem: PlacementProblem) -> Placement:
    """Everything on the accelerator; fails naming the GPU shortfall if it does not fit."""
    start = time.perf_counter()
    c = cfg
    bm = byte_model(c, problem)
    what = _what("all_gpu", problem)
    if not bm.has_gpu:
        raise PlacementInfeasibleError("GPU", bm.required_total - bm.cpu_buffer, 0.0,
                                       f"{what}: the hardware has no accelerator")
    need = bm.n_layers * _layer_bytes(bm) + bm.embed_in + bm.lm_head + bm.gpu_buffer
    avail = bm.gpu_capacity - (bm.cpu_buffer if bm.unified else 0.0)
    if need > avail:
        raise PlacementInfeasibleError("GPU", need, avail,
                                       f"{what} does not fit on the GPU: {bm.breakdown()}")
    on_gpu = np.ones(bm.n_layers, dtype=bool)
    return _whole_layers("all_gpu", c, problem, bm, on_gpu, True, True, start)


def solve_all_cpu(cfg: AllCPUConfig, problem: PlacementProblem) -> Placement:
    """Everything on the host (no accelerator buffers)."""
    start = time.perf_counter()
    c = cfg
    bm = byte_model(c, problem)
    bm = replace(bm, gpu_buffer=0.0)
    need = bm.n_layers * _layer_bytes(bm) + bm.embed_in + bm.lm_head + bm.cpu_buffer
    if need > bm.cpu_capacity:
        raise PlacementInfeasibleError("CPU", need, bm.cpu_capacity,
                                       f"{_what('all_cpu', problem)} does not fit in host "
                                       f"memory: {bm.breakdown()}")
    on_gpu = np.zeros(bm.n_layers, dtype=bool)
    return _whole_layers("all_cpu", c, problem, bm, on_gpu, False, False, start)
