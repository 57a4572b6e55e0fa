"""The simulator's twin of a measured engine, and the comparison (`powerbench validate`).

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

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from powerbench.engine.config import EngineConfig
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.measure.calibration import time_average
from powerbench.measure.op_counts import count_ops
from powerbench.simulator.config import (
    ComputeMode,
    OpCounts,
    PrefillConfig,
    PrefillMode,
    SimulatorConfig,
)
from powerbench.threads import torch_threads

BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0}


def twin_config(dense: bool, ops: OpCounts, dtype: str, sparse_call_us: float | None = None,
                dense_prompt_rows: int = 0, threads: int = 0) -> SimulatorConfig:
    """The cost model's description of one of our CPU engines (a sparse engine that runs
    batches of at least `dense_prompt_rows` rows densely gets PrefillMode.dense) on
    `threads` threads (0: torch's default, every core): the profile's kernel rates of that
    dtype and thread count are charged."""
    prefill = (PrefillConfig(mode=PrefillMode.dense, gpu_min_tokens=dense_prompt_rows)
               if dense_prompt_rows > 0 and not dense else PrefillConfig(mode=PrefillMode.hybrid))
    return SimulatorConfig(
        mode=ComputeMode.dense if dense else ComputeMode.sparse,
        cpu_sparse_call_us=sparse_call_us, cpu_threads=threads or None,
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


def twin_of(decoder: Any, prompt_ids: torch.Tensor) -> tuple[bool, OpCounts, str, int]:
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


def validate_engine(engine_cfg: EngineConfig, loaded: Any, prompts: Sequence[str], bench: Any,
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
    with torch_threads(bench.threads), torch.inference_mode():
        decoder = build_engine(engine_cfg).build_decoder(loaded, **context)
        ids = build_prompt_batch(loaded.tokenizer, list(prompts), min(bench.prompt_tokens, 8),
                                 bench.batch_size)
        dense, ops, dtype, dense_rows = twin_of(decoder, ids.to(decoder.device))

    def sim_metrics(hw: HardwareProfile) -> dict[str, float]:
        calibration = hw.meta.get("calibration", {})
        twin = twin_config(dense, ops, dtype, calibration.get("calibrated_sparse_call_us"),
                           dense_rows, bench.threads)
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
    name = engine_cfg.name
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


def timed_generation(decoder: Any, ids: torch.Tensor, new_tokens: int) -> Any:
    """One generation's RunTiming (the FFN rewound first, e.g. replayed active sets)."""
    from powerbench.engine.timing import StepClock

    rewind = getattr(decoder.ffn, "rewind", None)
    if rewind is not None:
        rewind()
    clock = StepClock(decoder.device)
    decoder.generate(ids, new_tokens, clock=clock)
    return clock.timing()


def validate_decoders(decoders: dict[str, Any], ids: torch.Tensor, spec: Any, bench: Any,
                      profile: Any, placement: Any, local: HardwareProfile,
                      predictors: dict[str, Any] | None = None,
                      calibrate: Callable[[], HardwareProfile] | None = None,
                      rounds: int = 3) -> list[EngineValidation]:
    """`validate_engine` for ready-built decoders on the prompt batch `ids` (e.g. the
    real-size synthetic-weight decoders of powerbench.engine.synthetic, which have no
    loaded model), measured in INTERLEAVED rounds: after `bench.warmup` untimed
    generations of each, every round runs `bench.repeats` timed generations of every
    decoder, each round in its own seeded random order (drifting load hits all alike), with the
    calibrations before, between and after the rounds. Each decoder's measured metrics are
    medians over all its timed generations (with repeats=1: the median over rounds);
    `predictors[name]` is what its twin is told about its predictor (None: dense)."""
    from powerbench.engine.timing import summarize
    from powerbench.measure.harness import round_orders
    from powerbench.progress import Progress
    from powerbench.simulator.simulate import simulate

    predictors = predictors or {}
    batch, prompt, new = bench.batch_size, ids.shape[1], bench.new_tokens
    names = list(decoders)
    with torch_threads(bench.threads), torch.inference_mode():
        twins = {n: twin_of(d, ids[:, :min(prompt, 8)]) for n, d in decoders.items()}

    def sim_metrics(name: str, hw: HardwareProfile) -> dict[str, float]:
        dense, ops, dtype, dense_rows = twins[name]
        calibration = hw.meta.get("calibration", {})
        twin = twin_config(dense, ops, dtype, calibration.get("calibrated_sparse_call_us"),
                           dense_rows, bench.threads)
        return simulate(twin, spec, profile, placement, hw,
                        predictors=None if dense else predictors.get(name), bench=bench).metrics

    samples: list[HardwareProfile] = []

    def sample() -> None:
        if calibrate is not None:
            samples.append(calibrate())

    runs: dict[str, list[Any]] = {n: [] for n in names}
    paired: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with torch_threads(bench.threads), torch.inference_mode():
        for name in names:
            for _ in range(bench.warmup):
                timed_generation(decoders[name], ids, new)
    sample()
    progress = Progress(f"validate rounds ({', '.join(names)})", max(rounds, 1))
    for order in round_orders(names, max(rounds, 1)):
        this_round: dict[str, list[Any]] = {n: [] for n in names}
        with torch_threads(bench.threads), torch.inference_mode():
            for name in order:
                for _ in range(max(bench.repeats, 1)):
                    this_round[name].append(timed_generation(decoders[name], ids, new))
        sample()
        progress.step()
        for name in names:
            runs[name] += this_round[name]
            if calibrate is not None:
                paired[name].append(compare(
                    summarize(this_round[name], batch, prompt),
                    sim_metrics(name, time_average(*samples[-2:])), new, batch))
    hardware = {"profile": local}
    if samples:
        hardware["calibrated"] = time_average(*samples)
    out = []
    for name in names:
        measured = {**summarize(runs[name], batch, prompt),
                    **best_rates(runs[name], new, batch, prompt)}
        ffn_metrics = getattr(decoders[name].ffn, "metrics", None)
        if callable(ffn_metrics):
            measured.update(ffn_metrics() or {})
        for variant, hw in hardware.items():
            sim = sim_metrics(name, hw)
            errors = compare(measured, sim, new, batch)
            if paired[name] and variant == "calibrated":
                errors |= {f"{k.removesuffix('_pct')}_paired_pct": statistics.median(
                               p[k] for p in paired[name])
                           for k in ("sim_error_pct", "sim_prefill_error_pct")}
            out.append(EngineValidation(name, dict(measured), sim, errors, twins[name][1],
                                        variant, hw))
    return out
