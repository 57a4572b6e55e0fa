"""Validation of the cost model against measurement on this machine (`hardware=local`).

For each measured engine (default `dense` and `sparse_cpu`) on the trained tiny model:

    measured   run_engine(engine) -> decode / prefill tokens/s          (powerbench.engine)
    simulated  simulate(its twin)  -> the same metrics from the cost model
    error      sim_error_pct = 100 x (simulated - measured) / measured  (decode tokens/s;
               sim_prefill_error_pct, sim_end_to_end_error_pct likewise)

The twin is the engine described to the cost model: dense or sparse compute, the model's
own dtype for activations and the KV cache, the placement (`all_cpu` here: no GPU), the
engine's predictors, and its operator counts per layer COUNTED from the engine itself (a
torch dispatch mode records the aten operators one decode step issues: structure, not
time). The machine's rates come from the `local` profile's microbenchmarks; with
`calibrate=True` five more microbenchmarks replace its effective values (never the end
result): the streaming bandwidth of matrix-vector products over a working set the size of
the model's weights in matrices of its width (the profile's test is a 256 MB torch.sum:
a different kernel and working set), the per-operator cost of a toy attention block's
operators issued from Python (our engine's operators are Python calls of that mix; the
profile's dispatch test is a bare torch.add), the FLOP/s of one layer's matrix products
for the prompt at the model's shapes (the profile's test is a 512^3 GEMM), the FLOP/s of
causal attention over the prompt at the model's heads (scores; a small fused-attention
kernel runs far below GEMM rate), and the fixed cost of one call of the engine's fused
sparse FFN operator (an empty active set at the model's shapes) beyond one dispatch,
charged once per sparse layer call. Calibration
microbenchmarks report medians, like the engines (on a shared machine a best-of catches
only quiet moments), and run before, between and after the engine's rounds (averaged
in time), so that both sides see the same mix of the machine's fast and slow spells.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.simulator.config import (
    ComputeMode,
    OpCounts,
    PrefillConfig,
    PrefillMode,
    SimulateConfig,
)

BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0}


# ---- operator counts of our engine ---------------------------------------------------------
class _Counter(TorchDispatchMode):
    """Counts aten operators by region ("ffn", or "other")."""

    def __init__(self) -> None:
        super().__init__()
        self.region = "other"
        self.counts: dict[str, int] = {"ffn": 0, "other": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.counts[self.region] += 1
        return func(*args, **(kwargs or {}))


class _RegionFFN:
    def __init__(self, ffn: Any, counter: _Counter) -> None:
        self.ffn, self.counter = ffn, counter

    def __call__(self, layer_idx: int, x: torch.Tensor, observer: Any = None) -> torch.Tensor:
        self.counter.region = "ffn"
        try:
            return self.ffn(layer_idx, x, observer)
        finally:
            self.counter.region = "other"


def _step_counts(decoder: Any, n_layers: int, prompt: torch.Tensor,
                 sample: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, int]:
    from powerbench.engine.decoder import Decoder

    weights = replace(decoder.w, layers=decoder.w.layers[:n_layers])
    sub = Decoder(weights, ffn=decoder.ffn)
    counter = _Counter()
    sub.ffn = _RegionFFN(decoder.ffn, counter)
    with torch.inference_mode():
        cache = sub.new_cache(prompt.shape[0], prompt.shape[1] + 2)
        logits = sub.forward(prompt, cache, last_only=True)[:, -1]
        token = sample(logits)
        with counter:
            logits = sub.forward(token[:, None], cache)[:, -1]
            sample(logits)
    return counter.counts


def count_ops(decoder: Any, prompt: torch.Tensor,
              sample: Callable[[torch.Tensor], torch.Tensor] | None = None,
              sparse: bool = False) -> OpCounts:
    """Operators per layer (attention + norms + residual adds; FFN incl. its predictor) and
    per token (embedding, final norm, output projection, token choice) of one decode step,
    from decoders with one and with all layers."""
    sample = sample or (lambda logits: logits.argmax(dim=-1))
    n = decoder.w.n_layers
    full = _step_counts(decoder, n, prompt, sample)
    one = _step_counts(decoder, 1, prompt, sample) if n > 1 else full
    per_layer_other = (full["other"] - one["other"]) / (n - 1) if n > 1 else 0.0
    ffn = full["ffn"] / n
    outside = one["other"] - per_layer_other
    return OpCounts(attention=round(per_layer_other), predictor=0,
                    ffn_dense=0 if sparse else round(ffn), ffn_sparse=round(ffn) if sparse else 0,
                    lm_head=max(round(outside), 0))


@contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ---- calibration microbenchmarks -----------------------------------------------------------
def _median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `repeats` calls after one warm-up: the same statistic as the
    engines' metrics (median of repeats), so that on a shared machine the calibration and
    the engine see the same kind of load (a best-of would catch only the quiet moments)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


def working_set_bandwidth(nbytes: float, dim: int = 256, dtype: torch.dtype = torch.float32,
                          threads: int | None = None, repeats: int = 31) -> float:
    """Bytes/s of matrix-vector products streaming `nbytes` of [rows, dim] matrices (split
    in 1 MB pieces, one product each, like a model's weight matrices)."""
    elem = torch.tensor([], dtype=dtype).element_size()
    rows = max(int(2**20 // (dim * elem)), 1)
    n = max(int(nbytes // (rows * dim * elem)), 1)
    mats = [torch.randn(rows, dim, dtype=dtype) for _ in range(n)]
    x = torch.randn(1, dim, dtype=dtype)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            t = _median_time(lambda: [F.linear(x, m) for m in mats], repeats)
    finally:
        torch.set_num_threads(before)
    return n * rows * dim * elem / t


def shaped_gemm_flops(rows: int, d_model: int, d_ffn: int,
                      dtype: torch.dtype = torch.float32, repeats: int = 31) -> float:
    """FLOP/s of one decoder layer's matrix products for a prompt of `rows` tokens: four
    [rows, d_model] x [d_model, d_model] (Q, K, V, O) and the FFN pair through d_ffn
    (the profile's test, one 512^3 GEMM, is far more efficient than these shapes)."""
    x = torch.randn(rows, d_model, dtype=dtype)
    attn = [torch.randn(d_model, d_model, dtype=dtype) for _ in range(4)]
    w1 = torch.randn(d_ffn, d_model, dtype=dtype)
    w2 = torch.randn(d_model, d_ffn, dtype=dtype)

    def layer() -> None:
        for w in attn:
            F.linear(x, w)
        F.linear(F.linear(x, w1), w2)

    with torch.inference_mode():
        t = _median_time(layer, repeats)
    return 2.0 * rows * (4 * d_model * d_model + 2 * d_model * d_ffn) / t


def attention_flops(rows: int, n_heads: int, head_dim: int,
                    dtype: torch.dtype = torch.float32, repeats: int = 31) -> float:
    """FLOP/s of causal scaled-dot-product attention over a prompt of `rows` tokens at the
    model's heads, counted as the cost model counts scores: 4 x heads x head_dim x
    (query, key) pairs (the profile's GEMM test says nothing about this kernel)."""
    q, k, v = (torch.randn(1, n_heads, rows, head_dim, dtype=dtype) for _ in range(3))
    with torch.inference_mode():
        t = _median_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                         repeats)
    return 4.0 * n_heads * head_dim * rows * (rows + 1) / 2 / t


def python_op_seconds(iters: int = 300) -> float:
    """Seconds per operator of a toy pre-norm attention block (d_model 64, 4 heads, 8 cached
    tokens) issued from Python: layer norm, Q/K/V/O products with their views and
    transposes, KV-cache writes, scaled-dot-product attention, the residual add. Its
    operators are counted like the engine's (aten dispatches), so the cost per operator
    carries the same mix of cheap and dearer kernels; the shapes are small enough that
    no read or FLOP shows. (A tight loop of one small `F.linear` gives ~25% less here.)"""
    d, heads = 64, 4
    hd = d // heads
    x, w, b = torch.randn(1, 1, d), torch.randn(d, d), torch.randn(d)
    ln_w, ln_b = torch.ones(d), torch.zeros(d)
    keys, values = torch.randn(1, heads, 9, hd), torch.randn(1, heads, 9, hd)

    def block() -> torch.Tensor:
        a = F.layer_norm(x, (d,), ln_w, ln_b)
        q, k, v = (F.linear(a, w, b).view(1, 1, heads, hd).transpose(1, 2) for _ in range(3))
        keys[:, :, 8:9] = k
        values[:, :, 8:9] = v
        o = F.scaled_dot_product_attention(q, keys, values)
        return x + F.linear(o.transpose(1, 2).reshape(1, 1, d), w, b)

    counter = _Counter()
    with torch.inference_mode():
        with counter:
            block()
        ops = sum(counter.counts.values())

        def run() -> None:
            for _ in range(iters):
                block()

        return _median_time(run, 7) / (iters * ops)


def sparse_call_seconds(d_model: int, d_ffn: int, backend: str = "sparse_cpu",
                        iters: int = 2000) -> float:
    """Seconds per call of the engine's fused predictor + sparse FFN operator at the model's
    shapes on an EMPTY active set with a rank-1 predictor: the operator's fixed cost (its
    dispatch, kernel set-up, output allocation), not its reads."""
    from powerbench.ops import PredictorWeights, ReluFFNWeights, get_backend

    ops = get_backend(backend)
    w = ReluFFNWeights(torch.randn(d_ffn, d_model), torch.zeros(d_ffn),
                       torch.randn(d_ffn, d_model), torch.zeros(d_model))
    p = PredictorWeights(torch.randn(1, d_model), torch.zeros(1), torch.randn(1, d_ffn),
                         torch.zeros(d_ffn), threshold=float("inf"))
    call, x = ops.prepare_ffn_predicted(w, p), torch.randn(1, d_model)

    def run() -> None:
        for _ in range(iters):
            call(x)

    with torch.inference_mode():
        return _median_time(run, 7) / iters


def calibrate_local(hardware: HardwareProfile, working_set_bytes: float, dim: int,
                    dtype: torch.dtype = torch.float32, gemm_rows: int | None = None,
                    d_ffn: int | None = None, threads: int = 0,
                    attention_shape: tuple[int, int, int] | None = None,
                    ) -> tuple[HardwareProfile, dict]:
    """The local profile with its CPU bandwidth, operator cost, (with gemm_rows and d_ffn)
    GEMM FLOP/s and sparse-call cost, and (with attention_shape = (prompt tokens, heads,
    head_dim)) attention-score FLOP/s re-measured for this model's shapes, with the
    engine's thread count (0: torch's default) (microbenchmarks only; see the module
    docstring)."""
    with _threads(threads):
        bw = working_set_bandwidth(working_set_bytes, dim, dtype)
        op_s = python_op_seconds()
        flops = hardware.cpu.effective_flops
        sparse_extra_s = 0.0
        attention = hardware.cpu.effective_attention_flops
        if attention_shape:  # (prompt tokens, heads, head_dim)
            attention = attention_flops(*attention_shape, dtype=dtype)
        if gemm_rows and d_ffn:
            flops = shaped_gemm_flops(gemm_rows, dim, d_ffn, dtype)
            sparse_extra_s = max(sparse_call_seconds(dim, d_ffn) - op_s, 0.0)
    cpu = replace(hardware.cpu, effective_bw=bw, effective_flops=flops,
                  effective_attention_flops=attention)
    units = dict(hardware.units)
    units[hardware.host] = cpu
    meta = {"calibrated_bw_gb_s": bw / 1e9, "calibrated_op_us": op_s * 1e6,
            "calibrated_sparse_call_us": sparse_extra_s * 1e6,
            "calibrated_gflops": (flops or 0.0) / 1e9,
            "calibrated_attention_gflops": (attention or 0.0) / 1e9,
            "profile_bw_gb_s": hardware.cpu_bw / 1e9, "profile_op_us": hardware.launch_s * 1e6,
            "profile_gflops": (hardware.cpu.effective_flops or 0.0) / 1e9}
    return replace(hardware, units=units, launch_s=op_s,
                   meta={**hardware.meta, "calibration": meta}), meta


# ---- the twin and the comparison -----------------------------------------------------------
def twin_config(dense: bool, ops: OpCounts, dtype: str, sparse_call_us: float | None = None,
                dense_prompt_rows: int = 0) -> SimulateConfig:
    """The cost model's description of one of our CPU engines (a sparse engine that runs
    batches of at least `dense_prompt_rows` rows densely gets PrefillMode.dense)."""
    prefill = (PrefillConfig(mode=PrefillMode.dense, gpu_min_tokens=dense_prompt_rows)
               if dense_prompt_rows > 0 and not dense else PrefillConfig(mode=PrefillMode.hybrid))
    return SimulateConfig(
        mode=ComputeMode.dense if dense else ComputeMode.sparse,
        cpu_sparse_call_us=sparse_call_us,
        kv_bytes_per_value=BYTES.get(dtype, 4.0), activation_bytes=BYTES.get(dtype, 4.0),
        cpu_ops=ops, gpu_ops=ops, prefill=prefill)


def error_pct(simulated: float, measured: float) -> float:
    return 100.0 * (simulated - measured) / measured if measured > 0 else float("nan")


def best_rates(runs: Sequence[Any], new_tokens: int, batch: int,
               prompt_tokens: int) -> dict[str, float]:
    """Decode / prefill tokens/s of the FASTEST timed repeat (the least disturbed by other
    processes, as the microbenchmarks report their best): the noise-robust comparison."""
    if not runs:
        return {}
    decode = min(r.decode_s for r in runs)
    prefill = min(r.prefill_s for r in runs)
    return {"best_decode_tokens_per_s": (new_tokens - 1) * batch / decode if decode > 0
            else float("nan"),
            "best_prefill_tokens_per_s": prompt_tokens * batch / prefill}


def compare(measured: dict[str, float], simulated: dict[str, float],
            new_tokens: int, batch: int) -> dict[str, float]:
    """sim_error_pct (decode), sim_prefill_error_pct, sim_end_to_end_error_pct against the
    engine's own metrics (medians of the repeats), and sim_error_best_pct /
    sim_prefill_error_best_pct against the fastest repeat (when `best_*` are given)."""
    total_s = (measured["prefill_ms"] + measured["decode_ms"]) / 1e3
    e2e = new_tokens * batch / total_s if total_s > 0 else float("nan")
    best = {}
    if "best_decode_tokens_per_s" in measured:
        best = {"sim_error_best_pct": error_pct(simulated["sim_decode_tokens_per_s"],
                                                measured["best_decode_tokens_per_s"]),
                "sim_prefill_error_best_pct": error_pct(simulated["sim_prefill_tokens_per_s"],
                                                        measured["best_prefill_tokens_per_s"])}
    return best | {
        "end_to_end_tokens_per_s": e2e,
        "sim_error_pct": error_pct(simulated["sim_decode_tokens_per_s"],
                                   measured["decode_tokens_per_s"]),
        "sim_prefill_error_pct": error_pct(simulated["sim_prefill_tokens_per_s"],
                                           measured["prefill_tokens_per_s"]),
        "sim_end_to_end_error_pct": error_pct(simulated["sim_end_to_end_tokens_per_s"], e2e),
    }


@dataclass
class EngineValidation:
    engine: str
    measured: dict[str, float]
    simulated: dict[str, float]
    errors: dict[str, float]
    ops: OpCounts
    hardware_variant: str  # "profile" (local as measured) or "calibrated"
    hardware: HardwareProfile

    def row(self) -> dict[str, Any]:
        return {"engine": self.engine, "hardware_variant": self.hardware_variant,
                "measured_decode_tokens_per_s": self.measured["decode_tokens_per_s"],
                "sim_decode_tokens_per_s": self.simulated["sim_decode_tokens_per_s"],
                "sim_error_pct": self.errors["sim_error_pct"],
                "sim_error_paired_pct": self.errors.get("sim_error_paired_pct", float("nan")),
                "measured_best_decode_tokens_per_s":
                    self.measured.get("best_decode_tokens_per_s", float("nan")),
                "sim_error_best_pct": self.errors.get("sim_error_best_pct", float("nan")),
                "measured_prefill_tokens_per_s": self.measured["prefill_tokens_per_s"],
                "sim_prefill_tokens_per_s": self.simulated["sim_prefill_tokens_per_s"],
                "sim_prefill_error_pct": self.errors["sim_prefill_error_pct"],
                "sim_prefill_error_paired_pct":
                    self.errors.get("sim_prefill_error_paired_pct", float("nan")),
                "sim_prefill_error_best_pct":
                    self.errors.get("sim_prefill_error_best_pct", float("nan")),
                "measured_end_to_end_tokens_per_s": self.errors["end_to_end_tokens_per_s"],
                "sim_end_to_end_tokens_per_s": self.simulated["sim_end_to_end_tokens_per_s"],
                "sim_end_to_end_error_pct": self.errors["sim_end_to_end_error_pct"],
                "ops_attention": self.ops.attention,
                "ops_ffn": self.ops.ffn_dense or self.ops.ffn_sparse,
                "ops_token": self.ops.lm_head}


def _combine(profiles: Sequence[HardwareProfile], rate: Callable[[list[float]], float],
             cost: Callable[[list[float]], float]) -> HardwareProfile:
    """The first profile with CPU rates combined by `rate` and per-call costs by `cost`."""
    a = profiles[0]

    def rates(get: Callable[[HardwareProfile], float | None]) -> float | None:
        values = [get(p) for p in profiles]
        return None if not all(values) else rate(values)  # type: ignore[arg-type]

    cpu = replace(a.cpu, effective_bw=rates(lambda p: p.cpu.effective_bw),
                  effective_flops=rates(lambda p: p.cpu.effective_flops),
                  effective_attention_flops=rates(lambda p: p.cpu.effective_attention_flops))
    meta = dict(a.meta)
    calls = [p.meta.get("calibration", {}).get("calibrated_sparse_call_us") for p in profiles]
    if all(c is not None for c in calls):
        meta["calibration"] = {**a.meta.get("calibration", {}),
                               "calibrated_sparse_call_us": cost(calls)}  # type: ignore[arg-type]
    return replace(a, units={**a.units, a.host: cpu},
                   launch_s=cost([p.launch_s for p in profiles]), meta=meta)


def time_average(*profiles: HardwareProfile) -> HardwareProfile:
    """Calibrations taken at several times, averaged in time: harmonic mean of the rates
    (a byte's mean cost), arithmetic mean of the per-call costs."""
    return _combine(profiles, lambda v: len(v) / sum(1.0 / x for x in v), statistics.fmean)


def _twin_of(decoder: Any, prompt_ids: torch.Tensor) -> tuple[bool, OpCounts, str, int]:
    """(dense?, operator counts, dtype name, dense_from_rows) of one of our decoders."""
    from powerbench.engine.decoder import Decoder

    dense = type(decoder.ffn).__name__ == "DenseFFN"
    ops = count_ops(decoder, prompt_ids, sparse=not dense)
    dense_rows = getattr(decoder.ffn, "dense_from_rows", 0)
    if dense_rows and not dense:  # its prompts run the dense FFN: count that one too
        ops = replace(ops, ffn_dense=count_ops(Decoder(decoder.w), prompt_ids).ffn_dense)
    dtype = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(
        decoder.w.dtype, "fp32")
    return dense, ops, dtype, dense_rows


def validate_engine(engine_cfg: Any, loaded: Any, prompts: Sequence[str], bench: Any,
                    profile: Any, placement: Any, local: HardwareProfile,
                    predictors: Any | None = None,
                    calibrate: Callable[[], HardwareProfile] | None = None,
                    rounds: int = 3) -> list[EngineValidation]:
    """Measure one engine and simulate its twin with the `local` profile as cached
    ("profile") and, with `calibrate`, re-measured before, between and after `rounds`
    engine runs (bench.repeats timed generations each, pooled) and averaged in time
    ("calibrated"); compare (see the module docstring). With `calibrate`, each round is
    also compared with the calibrations on either side of it, and the median of those
    per-round errors is `sim_error_paired_pct` (`sim_prefill_error_paired_pct`): a round
    and its neighbouring calibrations mostly share one of the machine's speed spells."""
    from powerbench.engine import build_engine, build_prompt_batch, run_engine
    from powerbench.engine.timing import summarize
    from powerbench.simulator.simulate import simulate

    context = {"predictors": predictors, "placement": placement}
    with _threads(bench.threads), torch.inference_mode():
        decoder = build_engine(engine_cfg).build_decoder(loaded, **context)
        ids = build_prompt_batch(loaded.tokenizer, list(prompts), min(bench.prompt_tokens, 8),
                                 bench.batch_size)
        dense, ops, dtype, dense_rows = _twin_of(decoder, ids.to(decoder.device))

    def sim_metrics(hw: HardwareProfile) -> dict[str, float]:
        calibration = hw.meta.get("calibration", {})
        twin = twin_config(dense, ops, dtype, calibration.get("calibrated_sparse_call_us"),
                           dense_rows)
        return simulate(twin, loaded.spec, profile, placement, hw,
                        predictors=None if dense else predictors, bench=bench).metrics

    samples: list[HardwareProfile] = []

    def sample() -> None:
        if calibrate is not None:
            samples.append(calibrate())

    # `rounds` x (calibrate, measure), then calibrate: on a machine whose speed jumps
    # between modes for seconds at a time, short alternating slices let the medians of
    # both sides see the same mix of modes
    runs: list[Any] = []
    paired: list[dict[str, float]] = []
    sample()
    for _ in range(max(rounds, 1)):
        result = run_engine(engine_cfg, loaded, list(prompts), bench, **context)
        runs += result.runs
        sample()
        if calibrate is not None:
            paired.append(compare(result.metrics, sim_metrics(time_average(*samples[-2:])),
                                  bench.new_tokens, bench.batch_size))
    result.metrics.update(summarize(runs, bench.batch_size, bench.prompt_tokens))
    result.runs = runs
    hardware = {"profile": local}
    if samples:
        hardware["calibrated"] = time_average(*samples)
    measured = {**result.metrics, **best_rates(result.runs, bench.new_tokens, bench.batch_size,
                                                bench.prompt_tokens)}
    name = str(engine_cfg.get("name") if hasattr(engine_cfg, "get") else engine_cfg.name)
    out = []
    for variant, hw in hardware.items():
        sim = sim_metrics(hw)
        errors = compare(measured, sim, bench.new_tokens, bench.batch_size)
        if paired and variant == "calibrated":
            errors |= {f"{k.removesuffix('_pct')}_paired_pct": statistics.median(
                           p[k] for p in paired)
                       for k in ("sim_error_pct", "sim_prefill_error_pct")}
        out.append(EngineValidation(name, dict(measured), sim, errors, ops, variant, hw))
    return out


def summary_table(rows: Sequence[EngineValidation]) -> Any:
    import pandas as pd

    return pd.DataFrame([r.row() for r in rows])


# ---- the validation run (powerbench validate / experiments/validate_local.py) ---------------
VALIDATION_EXPERIMENT = "validation_local"
# Engines built here rather than from conf/engine: our decoder with HybridFFN on the CPU
# (every neuron "cold": the predicted neurons through the C++ extension) - a sparse CPU
# engine that exists whatever conf/engine offers.
ENGINE_ALIASES: dict[str, dict[str, Any]] = {
    "hybrid_cpu": {
        "_target_": "powerbench.engine.decoder_engine.DecoderEngine", "name": "hybrid_cpu",
        "ffn": {"_target_": "powerbench.engine.hybrid.HybridFFN", "active": "predictor",
                "gpu_backend": "sparse_torch", "cpu_backend": "sparse_cpu"},
    },
}
# bench.repeats=3: many short engine runs alternate with the calibrations (--rounds)
BASE_OVERRIDES = ("model=tiny_relu", "hardware=local", "solver=all_cpu", "bench.repeats=3",
                  f"tracking.experiment={VALIDATION_EXPERIMENT}")


def run_validation(engines: Sequence[str] = ("dense", "sparse_cpu"),
                   overrides: Sequence[str] = (), calibrate: bool = True,
                   predictor: str = "fixed", rounds: int = 12) -> list[EngineValidation]:
    """Measure and simulate each engine on `local`; log one MLflow run per (engine,
    hardware variant) with the measured metrics, the sim_* metrics and the errors."""
    from omegaconf import OmegaConf

    from powerbench.config import compose_config
    from powerbench.dataset import load_texts
    from powerbench.engine.base import TORCH_DTYPES
    from powerbench.hardware import load_hardware
    from powerbench.model.spec import WeightDType
    from powerbench.paths import cache_dir
    from powerbench.pipeline import build
    from powerbench.profiling.store import load_or_profile
    from powerbench.simulator.stage import hardware_node
    from powerbench.solver import solve
    from powerbench.tracking import Tracker

    cfg = compose_config([*BASE_OVERRIDES, *overrides])
    cache = cache_dir(cfg.cache_dir)
    loaded = build(cfg.model, cache_dir=cache)
    split = load_texts(cfg.dataset)
    profile, _ = load_or_profile(loaded, split.train, OmegaConf.to_object(cfg.profiling),
                                 split.name, cache)
    local = load_hardware(hardware_node(cfg))
    dtype = TORCH_DTYPES[WeightDType(cfg.model.dtype).value]

    def recalibrate() -> HardwareProfile:
        """The local profile's CPU rates re-measured now for this model's shapes."""
        working_set = loaded.spec.total_params * torch.tensor([], dtype=dtype).element_size()
        return calibrate_local(local, working_set, loaded.spec.d_model, dtype,
                               gemm_rows=cfg.bench.prompt_tokens * cfg.bench.batch_size,
                               d_ffn=loaded.spec.neurons_per_layer,
                               threads=cfg.bench.threads,
                               attention_shape=(cfg.bench.prompt_tokens, loaded.spec.n_heads,
                                                loaded.spec.head_dim))[0]

    placement = solve(cfg.solver, loaded.spec, profile, local,
                      weight_dtype=cfg.model.weight_dtype)
    tracker = Tracker(uri=cfg.tracking.uri, experiment=cfg.tracking.experiment,
                      enabled=cfg.tracking.enabled)
    results: list[EngineValidation] = []
    batch = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"  # this invocation's runs
    for name in engines:
        alias = ENGINE_ALIASES.get(name)
        ecfg = compose_config([*BASE_OVERRIDES, *overrides,
                               f"engine={'dense' if alias else name}",
                               *([f"predictor={predictor}"] if name != "dense" else []),
                               *([f"predictor.weight_dtype={WeightDType(cfg.model.dtype).value}"]
                                 if name != "dense" and predictor in ("fixed", "adaptive")
                                 else [])])
        engine_cfg = OmegaConf.create(alias) if alias else ecfg.engine
        predictors = None
        if ecfg.get("predictor") is not None:
            from powerbench.predictor import build_predictors

            predictors = build_predictors(ecfg.predictor, loaded, profile, cache)
        load_before = os.getloadavg()[0]
        runs = validate_engine(engine_cfg, loaded, split.heldout, ecfg.bench, profile,
                               placement, local, predictors,
                               calibrate=recalibrate if calibrate else None, rounds=rounds)
        load = {"host_load_avg_1m_before": load_before,
                "host_load_avg_1m_after": os.getloadavg()[0]}
        for v in runs:
            with tracker.run(f"validate-{name}-{v.hardware_variant}",
                             tags={"validation": "true", "hardware_variant": v.hardware_variant,
                                   "measured": "true", "validation_batch": batch}):
                tracker.log_params({**OmegaConf.to_container(ecfg, resolve=True),
                                    "engine": OmegaConf.to_container(engine_cfg, resolve=True)})
                tracker.log_params({"validation": {"hardware_variant": v.hardware_variant}})
                tracker.log_metrics({**v.measured, **v.simulated, **v.errors,
                                     "ops_attention": v.ops.attention,
                                     "ops_ffn": v.ops.ffn_dense or v.ops.ffn_sparse,
                                     "ops_token": v.ops.lm_head,
                                     "sim_cpu_sparse_call_us": v.hardware.meta.get(
                                         "calibration", {}).get("calibrated_sparse_call_us",
                                                                0.0),
                                     **load, "hw_cpu_gflops": (
                                         v.hardware.cpu.effective_flops or 0) / 1e9,
                                     "hw_cpu_attention_gflops": (
                                         v.hardware.cpu.effective_attention_flops or 0) / 1e9,
                                     **{f"hw_{k}": val for k, val in
                                        v.hardware.summary().items()}})
            results.append(v)
    return results


def default_engines() -> list[str]:
    from powerbench.config import CONF_DIR

    if (Path(CONF_DIR) / "engine" / "sparse_cpu.yaml").exists():
        return ["dense", "sparse_cpu"]
    print("conf/engine/sparse_cpu.yaml does not exist (yet): validating hybrid_cpu, our "
          "decoder with the predicted neurons through the C++ extension, instead")
    return ["dense", "hybrid_cpu"]


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from powerbench.figures.validation import validation_local

    parser = argparse.ArgumentParser(description="measured vs simulated tokens/s on local")
    parser.add_argument("--engines", default=None,
                        help="comma-separated conf/engine options or aliases "
                             f"({', '.join(ENGINE_ALIASES)}); default: dense and sparse_cpu "
                             "(hybrid_cpu where conf/engine has no sparse_cpu)")
    parser.add_argument("--predictor", default="fixed", help="predictors of sparse engines")
    parser.add_argument("--no-calibrate", action="store_true")
    parser.add_argument("--rounds", type=int, default=12,
                        help="engine runs per engine, with calibrations before, between and "
                             "after them")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. bench.new_tokens=64")
    args = parser.parse_args(argv)
    engines = args.engines.split(",") if args.engines else default_engines()
    rows = run_validation([e for e in engines if e], args.overrides,
                          calibrate=not args.no_calibrate, predictor=args.predictor,
                          rounds=args.rounds)
    print(summary_table(rows).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    tracking = [o.split("=", 1)[1] for o in args.overrides if o.startswith("tracking.uri=")]
    out = validation_local(tracking_uri=tracking[0] if tracking else None)
    print(f"\n-> {out.csv}, {out.png}")
    return 0
