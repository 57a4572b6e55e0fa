"""`powerbench validate`: measured engines vs their simulated twins on `hardware=local`.

The experiment's engine (`engine=`, default dense) on its model (default `tiny_relu`):
measured in `task.rounds` rounds with calibrations of the local profile's CPU rates
before, between and after them, and its twin simulated (see powerbench.measure.twin) with
the profile as cached (`profile`) and as re-measured around the rounds (`calibrated`).
The engines to compare are a Hydra sweep, each a typed `engine` option:

    powerbench -m validate                          # dense and sparse_cpu (the task yaml)
    powerbench -m validate engine=dense,sparse_cpu bench.threads=1,2
    powerbench validate engine=sparse_cpu           # one engine

conf/task/validate.yaml sets the defaults: hardware=local, solver=all_cpu, predictor=fixed
(sparse engines), bench.repeats=3, experiment `validation_local`. With
`model@task.synthetic_model=<model>` (e.g. opt_6_7b) it validates real-size shapes with
SYNTHETIC weights instead, `task.engines` side by side: powerbench.tasks.validate_synthetic.

Reports through the measurement harness (study `validation`): one row per engine and
hardware variant (measured, simulated, errors, the rates the twin was given), the table,
CSV/JSON/txt and the figure (`validation_local.png`, powerbench.figures.validation) in the
run directory, one MLflow run with `<engine>.<variant>.<column>` metrics; a sweep's jobs
are collected into one such report in the sweep directory (powerbench.measure.
sweep_reports); a re-run of the same config is skipped (`rerun=true` measures again);
`task.publish=true` also writes results/validation/.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any, NamedTuple

import torch

from powerbench.config import PowerbenchConfig, as_container
from powerbench.engine.base import TORCH_DTYPES
from powerbench.hardware import load_hardware
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.measure.calibration import calibrate_local
from powerbench.measure.harness import Report, run_benchmark
from powerbench.measure.twin import EngineValidation, validate_engine
from powerbench.model.spec import WeightDType
from powerbench.predictor import build_predictors
from powerbench.solver import solve
from powerbench.tasks.config import ValidateTask
from powerbench.tasks.inputs import model_inputs

STUDY = "validation"
# the numeric columns logged as `<engine>.<variant>.<column>` metrics
METRICS = ("measured_decode_tokens_per_s", "sim_decode_tokens_per_s", "sim_error_pct",
           "sim_error_paired_pct", "measured_best_decode_tokens_per_s", "sim_error_best_pct",
           "measured_prefill_tokens_per_s", "sim_prefill_tokens_per_s", "sim_prefill_error_pct",
           "sim_prefill_error_paired_pct", "measured_best_prefill_tokens_per_s",
           "sim_prefill_error_best_pct", "measured_end_to_end_tokens_per_s",
           "sim_end_to_end_tokens_per_s", "sim_end_to_end_error_pct", "ops_attention",
           "ops_ffn", "ops_token", "cpu_bw_gb_s", "op_us", "sparse_call_us", "cpu_gflops",
           "cpu_attention_gflops", "cpu_bw_min_gb_s", "cpu_bw_max_gb_s", "cpu_bw_spread_pct",
           "cpu_gflops_min", "cpu_gflops_max", "cpu_gflops_spread_pct")
SHOWN = ("engine", "hardware_variant", "measured_decode_tokens_per_s",
         "sim_decode_tokens_per_s", "sim_error_pct", "sim_error_paired_pct",
         "cpu_bw_spread_pct", "measured_prefill_tokens_per_s", "sim_prefill_tokens_per_s",
         "sim_prefill_error_pct", "cpu_gflops_spread_pct", "sim_end_to_end_error_pct")


class Cell(NamedTuple):
    """One phase's cell of a report row: its error, the error of each round against the
    calibrations beside it, and the rate the twin was charged for it (column `prefix` +
    `suffix`, from the KernelRates `field` in GB/s or GFLOP/s: `unit`), with that rate's
    sampled range and spread."""

    phase: str
    error: str
    paired: str
    prefix: str
    suffix: str
    field: str
    unit: str

    @property
    def rate(self) -> str:
        return f"{self.prefix}{self.suffix}"

    @property
    def low(self) -> str:
        return f"{self.prefix}_min{self.suffix}"

    @property
    def high(self) -> str:
        return f"{self.prefix}_max{self.suffix}"

    @property
    def spread(self) -> str:
        return f"{self.prefix}_spread_pct"


CELLS = (Cell("decode", "sim_error_pct", "sim_error_paired_pct", "cpu_bw", "_gb_s",
              "stream_bw", "GB/s"),
         Cell("prefill", "sim_prefill_error_pct", "sim_prefill_error_paired_pct", "cpu_gflops",
              "", "gemm_flops", "GFLOP/s"))


def sample_spread(samples: list[float] | None, prefix: str, scale: float,
                  unit: str) -> dict[str, float]:
    """The range of a rate's samples (the profile's over its sampling window; the in-run
    calibrations' for `calibrated`) and its spread, 100 x (max - min) / median (NaN with
    fewer than two samples)."""
    nan = float("nan")
    values = sorted(samples or [])
    if len(values) < 2:
        return {f"{prefix}_min{unit}": nan, f"{prefix}_max{unit}": nan,
                f"{prefix}_spread_pct": nan}
    mid = statistics.median(values)
    return {f"{prefix}_min{unit}": values[0] / scale, f"{prefix}_max{unit}": values[-1] / scale,
            f"{prefix}_spread_pct": 100.0 * (values[-1] - values[0]) / mid}


def engine_predictor(cfg: PowerbenchConfig, engine: str) -> object | None:
    """The predictor config a sparse engine runs with: the experiment's, stored in the
    model's compute dtype (the fused operator reads it in that dtype); none for dense."""
    if engine == "dense" or cfg.predictor is None:
        return None
    if hasattr(cfg.predictor, "weight_dtype"):
        return dataclasses.replace(cfg.predictor, weight_dtype=WeightDType(cfg.model.dtype))
    return cfg.predictor


def validation_row(v: EngineValidation, context: dict[str, Any], dtype: str,
                   threads: int) -> dict[str, Any]:
    """One report row: `context` (model, shapes ...), the comparison and the rates the
    twin was given: the engine-kernel entry of `dtype` at `threads` (0: every core) where
    the profile has one (what the cost model charges), else the generic figures."""
    hw, calibration = v.hardware, v.hardware.meta.get("calibration", {})
    kernel = hw.cpu.kernel(dtype, threads or None)
    return {**context, **v.row(),
            "measured_best_prefill_tokens_per_s":
                v.measured.get("best_prefill_tokens_per_s", float("nan")),
            "cpu_bw_gb_s": (kernel.stream_bw if kernel else hw.cpu_bw) / 1e9,
            "op_us": (kernel.op_s if kernel else hw.launch_s) * 1e6,
            "sparse_call_us": calibration.get("calibrated_sparse_call_us",
                                              kernel.sparse_call_s * 1e6 if kernel else 0.0),
            "cpu_gflops": (kernel.gemm_flops if kernel else hw.cpu.effective_flops or 0) / 1e9,
            "cpu_attention_gflops": (kernel.attention_flops if kernel
                                     else hw.cpu.effective_attention_flops or 0) / 1e9,
            **{k: v for c in CELLS for k, v in sample_spread(
                kernel.samples.get(c.field) if kernel else None, c.prefix, 1e9,
                c.suffix).items()}}


TOLERANCE_PCT = 15.0  # the cached profile's goal: within this of the measured median


def _then_and_now(profile: dict[str, Any], now: dict[str, Any], c: Cell) -> str:
    """'(X then, its samples A-B; Y <unit> now[, outside that range])'."""
    lo, hi = profile.get(c.low, math.nan), profile.get(c.high, math.nan)
    if math.isnan(lo) or math.isnan(hi):
        return f"({profile[c.rate]:.3g} then, {now[c.rate]:.3g} {c.unit} now)"
    outside = ", outside that range" if not lo <= now[c.rate] <= hi else ""
    return (f"({profile[c.rate]:.3g} then, its samples {lo:.3g}-{hi:.3g}; {now[c.rate]:.3g} "
            f"{c.unit} now{outside})")


def _why(row: dict[str, Any], other: dict[str, Any], c: Cell, tolerance: float) -> str:
    """Why a cell of the twin fed the cached profile is off (see tolerance_note)."""
    calibrations = (f"its calibrations {other.get(c.low, math.nan):.3g}-"
                    f"{other.get(c.high, math.nan):.3g} {c.unit}; the profile's "
                    f"{row[c.rate]:.3g}")
    if abs(other[c.error]) <= tolerance:
        return (f"the in-run calibration gives {other[c.error]:+.1f}%, so the machine ran at "
                f"another speed than when the profile was measured "
                f"{_then_and_now(row, other, c)}")
    if abs(other.get(c.paired, math.nan)) <= tolerance:
        return (f"the in-run calibration is off too ({other[c.error]:+.1f}%) but each round "
                f"against the calibrations beside it gives {other[c.paired]:+.1f}%, so the "
                f"machine's speed changed during the run ({calibrations})")
    if other.get(c.spread, math.nan) > tolerance:
        return (f"the in-run calibration is off too ({other[c.error]:+.1f}%, each round against "
                f"the calibrations beside it {other.get(c.paired, math.nan):+.1f}%) while the "
                f"calibrations themselves spread {other[c.spread]:.0f}% ({calibrations}): the "
                "machine's speed changed during the run by more than the tolerance, so this "
                "run cannot tell drift from a model miss")
    return (f"the in-run calibration is off too ({other[c.error]:+.1f}%): the microbenchmarks "
            "do not measure what the engine does")


def tolerance_note(rows: list[dict[str, Any]], tolerance: float = TOLERANCE_PCT) -> str:
    """Which cells of the twin fed the cached profile (`profile` rows) are outside
    ±`tolerance`% of the measured median, and why: where the in-run calibration (the same
    microbenchmarks re-measured around the rounds) is within it, the machine ran at another
    speed than when the profile was measured (its rate then, the range its samples spanned,
    and the rate now are given); where it is off too but each round is within it against
    the calibrations beside it (the paired error), the machine's speed changed during the
    run (the calibrations' range is given); where both are off while the calibrations
    themselves spread more than the tolerance, the run cannot tell drift from a model miss;
    else the microbenchmarks do not measure what the engine does."""
    calibrated = {r["engine"]: r for r in rows if r["hardware_variant"] == "calibrated"}
    off = []
    for row in (r for r in rows if r["hardware_variant"] == "profile"):
        for c in CELLS:
            if not abs(row[c.error]) > tolerance:
                continue
            cell = f"{row['engine']} {c.phase} {row[c.error]:+.1f}%"
            other = calibrated.get(row["engine"])
            off.append(f"{cell} (no in-run calibration to tell why)" if other is None
                       else f"{cell}: {_why(row, other, c, tolerance)}")
    if not off:
        return (f"every cell of the twin fed the cached `local` profile is within "
                f"±{tolerance:.0f}% of the measured median")
    return (f"outside ±{tolerance:.0f}% with the cached `local` profile: " + "; ".join(off))


def validation_report(name: str, title: str, rows: list[dict[str, Any]], figure: bool,
                      notes: list[str] | None = None, **fields: Any) -> Report:
    """The harness report of one `validate` invocation (both modes), with its figure and
    a note on the cells outside the cached profile's tolerance (`tolerance_note`)."""
    return Report(study=STUDY, name=name, rows=rows, key=("engine", "hardware_variant"),
                  title=title, metrics=METRICS, columns=SHOWN,
                  figure="powerbench.figures.validation.plot_validation" if figure else "",
                  notes=[*(notes or []), tolerance_note(rows)], **fields)


def profile_note(local: HardwareProfile) -> str:
    """When the cached profile's engine kernels were sampled, how, and under what load."""
    window = local.meta.get("kernel_window")
    if not window or not any(k.samples for k in local.cpu.kernels):
        return (f"the cached `local` profile ({local.measured_at or 'no date'}) has no "
                "sampled engine-kernel rates")
    samples = max(len(v) for k in local.cpu.kernels for v in k.samples.values())
    return (f"the cached `local` profile's engine-kernel rates: the median of {samples} "
            f"sample(s) each, spread over {window['started']} -> {window['ended'][11:]} "
            f"({window['seconds']:.0f} s), load average {window['load_before']:.2f} -> "
            f"{window['load_after']:.2f}; spread columns: 100 x (max - min) / median of the "
            "profile's samples (`profile` rows) or of the in-run calibrations (`calibrated`)")


def validate(task: ValidateTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    if task.synthetic_model:  # real-size shapes, synthetic weights: speed only
        from powerbench.tasks.validate_synthetic import validate_synthetic

        return validate_synthetic(task, cfg, out_dir)
    return run_benchmark(cfg, out_dir, lambda: measure_model(task, cfg), task.publish)


def measure_model(task: ValidateTask, cfg: PowerbenchConfig) -> Report:
    """The experiment's model (trained weights) in our engines vs their twins."""
    inputs = model_inputs(cfg)
    cache, loaded, split, profile = inputs.cache, inputs.loaded, inputs.split, inputs.profile
    local = load_hardware(cfg.hardware, cache_dir=cfg.cache_dir)
    dtype = TORCH_DTYPES[WeightDType(cfg.model.dtype).value]
    bench = cfg.bench

    def recalibrate() -> HardwareProfile:
        """The local profile's CPU rates re-measured now for this model's shapes."""
        working_set = loaded.spec.total_params * torch.tensor([], dtype=dtype).element_size()
        return calibrate_local(local, working_set, loaded.spec.d_model, dtype,
                               gemm_rows=bench.prompt_tokens * bench.batch_size,
                               d_ffn=loaded.spec.neurons_per_layer, threads=bench.threads,
                               attention_shape=(bench.prompt_tokens, loaded.spec.n_heads,
                                                loaded.spec.head_dim))[0]

    placement = solve(cfg.solver, loaded.spec, profile, local,
                      weight_dtype=cfg.model.weight_dtype)
    if cfg.engine is None:
        raise ValueError("validate needs an engine: engine=dense|sparse_cpu|... (or sweep "
                         "them: powerbench -m validate engine=dense,sparse_cpu)")
    predictor = engine_predictor(cfg, cfg.engine.name)
    predictors = (build_predictors(predictor, loaded, profile, cache)
                  if predictor is not None else None)
    results = validate_engine(cfg.engine, loaded, split.heldout, bench, profile, placement,
                              local, predictors,
                              calibrate=recalibrate if task.calibrate else None,
                              rounds=task.rounds)
    context = {"model": loaded.spec.name, "weights": "trained", "dtype": cfg.model.dtype}
    return validation_report(
        "validation_local", f"validate, {loaded.spec.name}: measured engine(s) vs their "
        f"simulated twins on hardware=local ({bench.threads or 'all'} thread(s), batch "
        f"{bench.batch_size}, prompt {bench.prompt_tokens}, {bench.new_tokens} new tokens, "
        f"{task.rounds} rounds x {bench.repeats} repeats)",
        [validation_row(v, context, cfg.model.dtype, bench.threads) for v in results],
        task.figure,
        params={"model": loaded.spec.name, "engine": as_container(cfg.engine),
                "predictor": as_container(predictor) if predictor else None,
                "solver": cfg.solver.name if cfg.solver else None,
                "bench": as_container(bench), "task": as_container(task)},
        notes=["profile: the twin fed the cached `local` hardware profile; calibrated: its "
               "CPU rates re-measured before, between and after the engine rounds",
               "errors: 100 x (simulated - measured) / measured; measured = median repeat",
               profile_note(local)])
