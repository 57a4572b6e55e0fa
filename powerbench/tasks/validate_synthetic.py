"""`powerbench validate model@task.synthetic_model=<model>`: the simulator's twin on REAL-SIZE
shapes with SYNTHETIC (seeded random) weights.

The decoders are bench-decode's (`task.synthetic_model`, powerbench.engine.synthetic):
`task.layers` layers of the model's real per-layer shapes (d_model, d_ffn, heads, vocab),
weights drawn at random in `task.dtype`, so only their SPEED is meaningful. The engines of
`task.engines`: `dense`, and each sparse backend (e.g. `sparse_cpu`) computing the active
sets replayed from the synthetic activation profile's trace (fitted to the published
statistics; `TraceReplay`, an oracle that costs nothing). The twin gets the same profile
(the kept layers, their traces: the same per-token sets) and is told the predictor is an
exact, free oracle. Measured in interleaved rounds with calibrations of the local CPU rates
at this model's working set and shapes before, between and after them
(`powerbench.measure.twin.validate_decoders`); the decode error is against each engine's
median over the rounds.

Reports through the measurement harness like `validate` (powerbench.tasks.validate): the
report `realsize_<model>_<dtype>_<n>of<N>_t<threads>` (study `validation`; rows carry the
run's UTC start and load average), its figure, one MLflow run in experiment
`validation_realsize` (never validation_local's figure); `task.publish=true` writes
results/validation/, one CSV per configuration, which `realsize_section` turns into the
section of the calibration page (`powerbench sensitivity`) that lists them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from powerbench.config import PowerbenchConfig, as_container
from powerbench.hardware import load_hardware
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.measure.calibration import calibrate_local
from powerbench.measure.harness import Report, run_benchmark
from powerbench.measure.twin import validate_decoders
from powerbench.solver import solve
from powerbench.tasks.config import ValidateTask
from powerbench.tasks.validate import profile_note, validation_report, validation_row

SYNTHETIC_NOTE = ("SYNTHETIC weights: only speed is meaningful (seeded random weights of the "
                  "real shapes; sparse active sets replayed from the synthetic activation "
                  "profile's trace, the twin fed the same profile)")
EXPERIMENT = "validation_realsize"


def build_decoders(weights: Any, trace: Any, engines: list[str]) -> dict[str, Any]:
    """`dense` and, per sparse backend named in `engines`, a SparseFFN on replayed sets."""
    from powerbench.engine.decoder import Decoder
    from powerbench.engine.sparse import SparseFFN
    from powerbench.engine.synthetic import TraceReplay

    check_engines(engines)
    return {name: Decoder(weights) if name == "dense" else
            Decoder(weights, ffn=SparseFFN(weights, name, TraceReplay(trace)))
            for name in engines}


def check_engines(engines: list[str]) -> None:
    from powerbench.ops import BACKENDS

    for name in engines:
        if name != "dense" and name not in BACKENDS:
            raise ValueError(f"task.engines: {name!r} is neither `dense` nor a sparse backend "
                             f"({', '.join(BACKENDS)}): the engines validated with synthetic "
                             "weights")


def validate_synthetic(task: ValidateTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    check_engines(list(task.engines))
    if getattr(cfg.tracking, "experiment", None) == "validation_local":  # not its figure
        cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking,
                                                                    experiment=EXPERIMENT))
    return run_benchmark(cfg, out_dir, lambda: measure_synthetic(task, cfg), task.publish)


def measure_synthetic(task: ValidateTask, cfg: PowerbenchConfig) -> Report:
    import torch

    from powerbench.tasks.inputs import synthetic_inputs

    assert task.synthetic_model is not None
    bench = cfg.bench
    inputs = synthetic_inputs(
        task.synthetic_model, task.layers, task.dtype, task.seed,
        bench, announce=lambda full, spec: print(
            f"{SYNTHETIC_NOTE}\nvalidate {spec.name}: {spec.n_layers} of {full.n_layers} "
            f"layers (per-layer shapes real: d_model {spec.d_model}, d_ffn {spec.d_ffn}, "
            f"{spec.n_heads} heads, vocab {spec.vocab_size}), {task.dtype}"))
    full, spec, dtype, weights = inputs.full, inputs.spec, inputs.dtype, inputs.weights
    build_s, trace, ids = inputs.build_s, inputs.trace, inputs.ids
    from powerbench.engine.synthetic import kept_profile

    profile = kept_profile(trace, spec)
    local = load_hardware(cfg.hardware, cache_dir=cfg.cache_dir)
    placement = solve(cfg.solver, spec, profile, local, weight_dtype=task.dtype)
    decoders = build_decoders(weights, trace, list(task.engines))
    oracle = SimpleNamespace(param_count=0)  # replayed sets: exact, no predictor weights
    predictors = {name: oracle for name in decoders if name != "dense"}
    elem = torch.tensor([], dtype=dtype).element_size()

    def recalibrate() -> HardwareProfile:
        """The local profile's CPU rates re-measured now at this model's working set/shapes."""
        return calibrate_local(local, spec.total_params * elem, spec.d_model, dtype,
                               gemm_rows=bench.prompt_tokens * bench.batch_size,
                               d_ffn=spec.neurons_per_layer, threads=bench.threads,
                               attention_shape=(bench.prompt_tokens, spec.n_heads,
                                                spec.head_dim))[0]

    results = validate_decoders(decoders, ids, spec, bench, profile, placement, local,
                                predictors, calibrate=recalibrate if task.calibrate else None,
                                rounds=task.rounds)
    context = {"model": spec.name, "weights": "synthetic", "dtype": task.dtype,
               "layers": spec.n_layers, "model_layers": full.n_layers,
               "d_model": spec.d_model, "d_ffn": spec.d_ffn, "batch": bench.batch_size,
               "prompt_tokens": bench.prompt_tokens, "new_tokens": bench.new_tokens,
               "threads": bench.threads, "rounds": task.rounds, "repeats": bench.repeats}
    name = f"realsize_{spec.name}_{task.dtype}_{spec.n_layers}of{full.n_layers}_t{bench.threads}"
    return validation_report(
        name, f"validate, {spec.name} shape (SYNTHETIC weights), {task.dtype}, "
        f"{spec.n_layers} of {full.n_layers} layers, {bench.threads or 'all'} thread(s): "
        f"measured vs simulated on hardware=local ({task.rounds} interleaved rounds x "
        f"{bench.repeats} repeat(s))",
        [validation_row(v, context, task.dtype, bench.threads) for v in results],
        task.figure, window_columns=True,
        params={**context, "engines": list(task.engines), "bench": as_container(bench),
                "task": as_container(task)},
        notes=[SYNTHETIC_NOTE,
               f"layers kept from the profile: {trace.layer_ids}; weights built in "
               f"{build_s:.0f} s; batch {bench.batch_size}, prompt {bench.prompt_tokens}, "
               f"{bench.new_tokens} new tokens",
               "profile: the twin fed the cached `local` hardware profile alone; calibrated: "
               "its CPU rates re-measured before, between and after the rounds; errors: "
               "100 x (simulated - measured) / measured median", profile_note(local)])


REALSIZE_COMMAND = ("powerbench validate model@task.synthetic_model=opt_1_3b task.layers=8 "
                    "task.rounds=3 task.dtype=<dtype> bench.threads=<n> task.publish=true")


def _pct(value: float) -> str:
    return "-" if value != value else f"{value:.0f}%"  # NaN: no samples to spread


def realsize_section(folder: Path, reports: int) -> str:
    """The calibration page's section on `validate` with synthetic weights: the rows of
    the newest `reports` published realsize reports (results/validation/realsize_*.csv,
    one per configuration), measured medians beside the twin fed the cached `local`
    profile ("profile") and the in-run calibration ("calibrated")."""
    import pandas as pd

    csvs = sorted(Path(folder).glob("realsize_*.csv"))
    if not csvs or reports <= 0:
        return ""
    frames = sorted((pd.read_csv(c) for c in csvs), key=lambda f: str(f["started"].iloc[0]))
    frame = pd.concat(frames[-reports:], ignore_index=True)
    lines = ["", "## The `local` profile predicts `powerbench validate` (MEASURED here)", "",
             f"Rows of `results/validation/realsize_*.csv`, one per configuration, each "
             f"written by `{REALSIZE_COMMAND}`: synthetic weights of OPT-1.3B's real shapes, "
             "8 of 24 layers; dates UTC, load = 1-minute load average before/after. "
             "`profile`: the twin fed the cached `local` profile alone (its engine-kernel "
             "rates, measured once per machine); `calibrated`: re-measured around the "
             "rounds. Errors: simulated vs the measured median. Spread: 100 x (max - min) "
             "/ median of the rate the twin was charged (stream GB/s for decode, GEMM "
             "FLOP/s for prefill) over the profile's samples or the in-run calibrations: "
             "how far the machine's own speed moved.", "",
             "| date | dtype | threads | engine | variant | decode meas. | decode sim. | error "
             "| spread | prefill meas. | prefill sim. | error | spread | load |",
             "|" + "---|" * 14]
    for r in frame.itertuples(index=False):
        bw, flops = (getattr(r, c, float("nan")) for c in ("cpu_bw_spread_pct",
                                                            "cpu_gflops_spread_pct"))
        lines.append(f"| {r.started} | {r.dtype} | {r.threads} | {r.engine} | "
                     f"{r.hardware_variant} | {r.measured_decode_tokens_per_s:.3g} | "
                     f"{r.sim_decode_tokens_per_s:.3g} | {r.sim_error_pct:+.1f}% | "
                     f"{_pct(bw)} | {r.measured_prefill_tokens_per_s:.3g} | "
                     f"{r.sim_prefill_tokens_per_s:.3g} | {r.sim_prefill_error_pct:+.1f}% | "
                     f"{_pct(flops)} | {r.load_avg_1m_before:.1f}-{r.load_avg_1m_after:.1f} |")
    return "\n".join(lines) + "\n"
