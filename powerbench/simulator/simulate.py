"""`simulate(...)`: simulated tokens/s, time breakdown and neuron-load split.

The same inputs as the measured engines (model shapes, activation profile, predictors,
placement, hardware, the `bench` lengths), replayed through the cost model:

    prefill  one pass of P x B prompt rows (powerbench.simulator.prefill)
    decode   N - 1 steps of B rows, step s attending to P + s tokens, each replaying its
             own trace tokens (per-token variance, batch union)

Metric definitions match powerbench.engine.timing (prefill yields the first token):
    sim_prefill_tokens_per_s   = P x B / prefill time
    sim_decode_tokens_per_s    = (N - 1) x B / decode time
    sim_end_to_end_tokens_per_s = N x B / (prefill + decode time)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.hardware.load import load_hardware
from powerbench.model.spec import ModelSpec
from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.simulator.config import (
    ComputeMode,
    PrefillMode,
    SimulatorConfig,
    TokenOverlapConfig,
)
from powerbench.simulator.cost import CostModel, PassCosts, PassShape
from powerbench.simulator.prefill import stream_prefill
from powerbench.simulator.public_prompt import public_prompt_work
from powerbench.simulator.rates import CPU, GPU
from powerbench.simulator.result import SimResult, breakdown_frame, layer_frame
from powerbench.simulator.workload import FFNWork, decode_passes, ffn_work, token_groups
from powerbench.solver.placement import Placement

PREDICTOR_BYTES_PER_PARAM = 2.0  # fp16 predictors


def bench_lengths(bench: Any) -> tuple[int, int, int]:
    """(prompt tokens, new tokens, batch) of a BenchConfig (None: its defaults)."""
    if bench is None:
        from powerbench.config.schema import BenchConfig

        bench = BenchConfig()
    prompt, new, batch = bench.prompt_tokens, bench.new_tokens, bench.batch_size
    if prompt < 1 or new < 1 or batch < 1:
        raise ValueError(f"bench lengths must be >= 1: prompt_tokens={prompt}, "
                         f"new_tokens={new}, batch_size={batch}")
    return prompt, new, batch


def predictor_inputs(cfg: SimulatorConfig, spec: ModelSpec, placement: Placement,
                     predictors: Any | None) -> tuple[np.ndarray, np.ndarray, str]:
    """(bytes per layer, predicted / true active ratio per layer, where they came from).

    A trained PredictorSet gives both per layer (test-split statistics); an oracle costs
    nothing and predicts exactly; else the placement's reserved predictor bytes, else an
    MLP of `cfg.predictor_hidden` (both with cfg.predicted_over_true)."""
    n = spec.n_layers
    ratio = np.full(n, float(cfg.predicted_over_true))
    if predictors is not None:
        stats = list(getattr(predictors, "stats", None) or [])
        if stats:
            nbytes = np.array([float(s.param_bytes) for s in stats])
            ratio = np.array([s.predicted_active_fraction / s.true_active_fraction
                              if s.true_active_fraction > 0 else 1.0 for s in stats])
            return nbytes, np.maximum(ratio, 0.0), "predictors"
        params = float(getattr(predictors, "param_count", 0))
        return np.full(n, params * PREDICTOR_BYTES_PER_PARAM / n), np.ones(n), "oracle"
    reserved = placement.gpu.predictors + placement.cpu.predictors
    if reserved > 0:
        return np.full(n, reserved / n), ratio, "placement"
    h = cfg.predictor_hidden
    params = h * (spec.d_model + spec.neurons_per_layer) + h + spec.neurons_per_layer
    return np.full(n, params * PREDICTOR_BYTES_PER_PARAM), ratio, "config"


def _work(spec: ModelSpec, profile: ActivationProfile, placement: Placement,
          mode: ComputeMode, rows: int, n_passes: int, offset: int,
          ratio: np.ndarray, token_skip: bool = False,
          overlap: TokenOverlapConfig | None = None) -> tuple[FFNWork, list[str]]:
    """FFN work of n_passes passes of `rows` tokens each (decode: rows = B)."""
    trace = profile.trace_tokens
    notes: list[str] = []
    if trace <= 0:
        notes.append("profile has no per-token traces: FFN work is the expectation from "
                     "neuron frequencies (no per-token variance)")
        work = ffn_work(spec, profile, placement, mode, None, rows, ratio, token_skip,
                        overlap)
        return work.take(np.zeros(n_passes, dtype=np.int64)), notes
    if rows > trace:
        notes.append(f"a pass of {rows} rows exceeds the {trace} trace tokens: its union "
                     "is taken over the whole trace")
        groups = token_groups(trace, trace, 1, offset)
        work = ffn_work(spec, profile, placement, mode, groups, rows, ratio, token_skip,
                        overlap)
        return work.take(np.zeros(n_passes, dtype=np.int64)), notes
    distinct, index = decode_passes(trace, rows, n_passes)
    groups = token_groups(trace, rows, distinct, offset)
    work = ffn_work(spec, profile, placement, mode, groups, rows, ratio, token_skip,
                        overlap)
    return work.take(index), notes


def _cached(cache: dict[str, tuple[FFNWork, list[str]]] | None, key: str,
            compute: Callable[[], tuple[FFNWork, list[str]]]) -> tuple[FFNWork, list[str]]:
    """`compute()`, kept in `cache[key]` (no cache: computed every time)."""
    if cache is None:
        return compute()
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def _steps_frame(costs: PassCosts, work: FFNWork, context: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({
        "step": np.arange(1, context.size + 1), "context": context,
        "seconds": costs.total,
        "gpu_active_neurons": work.gpu_active.sum(axis=1),
        "cpu_active_neurons": work.cpu_active.sum(axis=1),
        "gpu_computed_neurons": work.gpu_computed.sum(axis=1),
        "cpu_computed_neurons": work.cpu_computed.sum(axis=1),
        "gpu_bytes": costs.bytes_read[GPU], "cpu_bytes": costs.bytes_read[CPU],
    })


def weight_load_share(spec: ModelSpec, placement: Placement, work: FFNWork) -> float:
    """The GPU's share of the neuron load counted over ALL weight rows ("neurons",
    attention's included) multiplied per decode token (PowerInfer's Fig. 12 does not say
    whether it counts attention rows; `FFNWork.gpu_load_share` is the FFN-only count).
    Attention and the output projection are dense (all their rows, on their device); of the
    FFN, the neurons each device computes. Predictors are not model neurons and are left out."""
    attn_gpu = np.array([d == GPU for d in placement.attn_device], dtype=np.float64)
    attn = spec.attn_params_per_layer
    head = spec.vocab_size * spec.d_model
    gpu = (attn * attn_gpu.sum() + spec.params_per_neuron * work.gpu_computed.mean(axis=0).sum()
           + head * (placement.lm_head_device == GPU))
    cpu = (attn * (1 - attn_gpu).sum()
           + spec.params_per_neuron * work.cpu_computed.mean(axis=0).sum()
           + head * (placement.lm_head_device != GPU))
    return float(gpu / (gpu + cpu)) if gpu + cpu > 0 else 0.0


def predictor_metrics(spec: ModelSpec, pred_bytes: np.ndarray,
                      predictors: Any | None) -> dict[str, float]:
    """What the simulated run charged for predictors (Table 6 reads these)."""
    stats = list(getattr(predictors, "stats", None) or [])
    ranks = [s.rank for s in stats if getattr(s, "rank", None) is not None]
    out = {"sim_predictor_bytes": float(pred_bytes.sum()),
           "sim_predictor_param_share": float(pred_bytes.sum() / PREDICTOR_BYTES_PER_PARAM
                                              / max(spec.total_params, 1))}
    if ranks:
        out["sim_predictor_rank_mean"] = float(np.mean(ranks))
    return out


def use_stream_prefill(cfg: SimulatorConfig, hardware: HardwareProfile, rows: int) -> bool:
    return (cfg.prefill.mode is PrefillMode.gpu_stream and hardware.has_accelerator
            and rows >= cfg.prefill.gpu_min_tokens)


def simulate(cfg: SimulatorConfig | None, spec: ModelSpec, profile: ActivationProfile,
             placement: Placement, hardware: HardwareProfile | Any,
             predictors: Any | None = None, bench: Any | None = None,
             work_cache: dict[str, tuple[FFNWork, list[str]]] | None = None,
             cache_dir: str | os.PathLike | None = None) -> SimResult:
    """Simulated prefill / decode / end-to-end tokens/s of `spec` with `placement` on
    `hardware` for bench.prompt_tokens, bench.new_tokens and bench.batch_size.

    cfg: the typed conf/simulator config (None: SimulatorConfig's defaults).
    predictors: a PredictorSet / oracle (their sizes and predicted/true ratios) or None.
    work_cache: a dict kept across calls that differ ONLY in `cfg.efficiency`: the FFN work
        (which neurons each pass reads and computes, most of a call's time) does not depend
        on it, so it is computed once and re-costed (powerbench.tasks.calibration_set: `powerbench sensitivity`).
    cache_dir: where a `local` hardware config's measured profile is cached (the run's
        `cache_dir`; None: the default); unused when `hardware` is a HardwareProfile.
    """
    cfg = cfg if cfg is not None else SimulatorConfig()
    hw = load_hardware(hardware, cache_dir=cache_dir)
    prompt, new, batch = bench_lengths(bench)
    sparse = cfg.mode is ComputeMode.sparse
    pred_bytes, ratio, pred_source = predictor_inputs(cfg, spec, placement, predictors)
    model = CostModel(spec, placement, hw, cfg, pred_bytes if sparse else None)
    notes = [f"simulated {cfg.mode.value} compute of {spec.name} ({placement.weight_dtype}) "
             f"placed by {placement.solver} on {hw.name}; predictor costs from {pred_source}"
             if sparse else
             f"simulated dense compute of {spec.name} ({placement.weight_dtype}) placed by "
             f"{placement.solver} on {hw.name}"]

    # prefill: one pass of P x B rows
    rows = prompt * batch
    shape = PassShape.prefill(prompt, batch)
    stream = use_stream_prefill(cfg, hw, rows)
    dense_prompt = (cfg.prefill.mode is PrefillMode.dense and sparse
                    and rows >= cfg.prefill.gpu_min_tokens)
    pre_mode = ComputeMode.dense if stream or dense_prompt else cfg.mode
    overlap_key = f"|overlap={cfg.token_overlap.rho}"
    pre_work, n1 = _cached(work_cache, "prefill" + overlap_key, lambda: _work(
        spec, profile, placement, pre_mode, rows, 1, cfg.trace_offset, ratio, cfg.token_skip,
        cfg.token_overlap))
    pre_model = (CostModel(spec, placement, hw, replace(cfg, mode=ComputeMode.dense))
                 if dense_prompt else model)
    if cfg.prefill.mode is PrefillMode.powerinfer_public and sparse:
        pre_work = public_prompt_work(pre_work, spec, placement, rows, cfg.prefill.public)
    pre = stream_prefill(model, pre_work, shape) if stream else pre_model.forward(pre_work,
                                                                                  shape)
    prefill_s = float(pre.total.sum())

    # decode: N - 1 steps of B rows
    n_steps = new - 1
    metrics: dict[str, float] = {
        **(predictor_metrics(spec, pred_bytes, predictors) if sparse else {}),
        "sim_prefill_tokens_per_s": rows / prefill_s,
        "sim_prefill_ms": prefill_s * 1e3,
        "sim_prefill_dense_gpu": float(stream),
    }
    frames = [breakdown_frame("prefill", pre)]
    layer_frames = [layer_frame("prefill", pre)] if cfg.breakdown_per_layer else []
    steps = pd.DataFrame()
    decode_s = 0.0
    notes += n1
    if n_steps > 0:
        dec_work, n2 = _cached(work_cache, "decode" + overlap_key, lambda: _work(
            spec, profile, placement, cfg.mode, batch, n_steps, cfg.trace_offset + rows, ratio,
            cfg.token_skip, cfg.token_overlap))
        notes += n2
        context = prompt + np.arange(1, n_steps + 1)
        dec = model.forward(dec_work, PassShape.decode(context, batch))
        step_s = dec.total
        decode_s = float(step_s.sum())
        frames.append(breakdown_frame("decode", dec))
        if cfg.breakdown_per_layer:
            layer_frames.append(layer_frame("decode", dec))
        steps = _steps_frame(dec, dec_work, context)
        hybrid = dec.cpu_bound is not None and bool(dec.layer["sync"].any())
        metrics |= {
            "sim_decode_tokens_per_s": n_steps * batch / decode_s,
            "sim_decode_ms": decode_s * 1e3,
            "sim_decode_latency_ms_p50": float(np.percentile(step_s, 50) * 1e3),
            "sim_decode_latency_ms_p90": float(np.percentile(step_s, 90) * 1e3),
            "sim_gpu_neuron_load_share": weight_load_share(spec, placement, dec_work),
            "sim_gpu_ffn_load_share": dec_work.gpu_load_share(),
            "sim_gpu_compute_share": dec_work.gpu_compute_share(),
            "sim_gpu_bytes_per_step": float(dec.bytes_read[GPU].mean()),
            "sim_cpu_bytes_per_step": float(dec.bytes_read[CPU].mean()),
            "sim_hybrid_layers": float(np.sum((placement.gpu_counts > 0)
                                              & (placement.gpu_counts < spec.neurons_per_layer))),
        }
        if hybrid:
            split = dec.layer["sync"] > 0
            metrics["sim_ffn_cpu_bound_share"] = float(dec.cpu_bound[split].mean())
    metrics["sim_end_to_end_tokens_per_s"] = new * batch / (prefill_s + decode_s)
    if sparse:  # the predictors' critical-path time over the whole run (PowerInfer Fig. 17)
        passes = [pre] + ([dec] if n_steps > 0 else [])
        predictor_s = sum(float(c.layer[k].sum()) for c in passes for k in c.layer
                          if k.startswith("predictor@"))
        metrics["sim_predictor_time_share"] = predictor_s / (prefill_s + decode_s)
    return SimResult(metrics=metrics, breakdown=pd.concat(frames, ignore_index=True),
                     steps=steps, notes=notes,
                     layers=pd.concat(layer_frames, ignore_index=True) if layer_frames
                     else None)
