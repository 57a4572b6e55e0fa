"""`powerbench validate task.synthetic_model=<model>`: the simulator's twin on REAL-SIZE
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
median over the rounds. Rows are APPENDED to results/calibration/validation_realsize.csv (one
`validation_batch` per invocation) and one MLflow run per (engine, hardware variant) is
logged to experiment `validation_realsize` (never to validation_local's figure).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container
from powerbench.hardware import load_hardware
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.measure.calibration import calibrate_local
from powerbench.measure.twin import EngineValidation, summary_table, validate_decoders
from powerbench.paths import results_dir
from powerbench.solver import solve
from powerbench.tasks.config import ValidateTask

SYNTHETIC_NOTE = ("SYNTHETIC weights: only speed is meaningful (seeded random weights of the "
                  "real shapes; sparse active sets replayed from the synthetic activation "
                  "profile's trace, the twin fed the same profile)")
EXPERIMENT = "validation_realsize"


def sim_profile(trace: Any, spec: Any) -> Any:
    """The kept layers of `trace_profile` as an ActivationProfile of the capped `spec` (the
    simulator indexes layers 0..n-1; the same per-token traces the engine replays)."""
    from powerbench.profiling.activation_profile import ActivationProfile

    layers = [dataclasses.replace(layer, index=i) for i, layer in enumerate(trace.layers)]
    return ActivationProfile(model=spec.name, source="synthetic", dataset="synthetic",
                             n_tokens=layers[0].n_tokens, layers=layers,
                             meta={"layer_ids": trace.layer_ids})


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


def validate_synthetic(task: ValidateTask, cfg: PowerbenchConfig) -> list[EngineValidation]:
    import pandas as pd
    import torch

    from powerbench.tasks.inputs import synthetic_inputs

    assert task.synthetic_model is not None
    bench = cfg.bench
    check_engines(list(task.engines))
    inputs = synthetic_inputs(
        task.synthetic_model, task.layers, task.synthetic_overrides, task.dtype, task.seed,
        bench, announce=lambda full, spec: print(
            f"{SYNTHETIC_NOTE}\nvalidate {spec.name}: {spec.n_layers} of {full.n_layers} "
            f"layers (per-layer shapes real: d_model {spec.d_model}, d_ffn {spec.d_ffn}, "
            f"{spec.n_heads} heads, vocab {spec.vocab_size}), {task.dtype}"))
    full, spec, dtype, weights = inputs.full, inputs.spec, inputs.dtype, inputs.weights
    build_s, trace, ids = inputs.build_s, inputs.trace, inputs.ids
    profile = sim_profile(trace, spec)
    local = load_hardware(cfg.hardware)
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

    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    results = validate_decoders(decoders, ids, spec, bench, profile, placement, local,
                                predictors, calibrate=recalibrate if task.calibrate else None,
                                rounds=task.rounds)
    measure_s = time.perf_counter() - start
    load = {"host_load_avg_1m_before": load_before,
            "host_load_avg_1m_after": os.getloadavg()[0]}
    batch = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    print(f"\n{spec.name} shape, SYNTHETIC weights, {task.dtype}, {spec.n_layers} of "
          f"{full.n_layers} layers (kept from the profile: {trace.layer_ids}), weights built "
          f"in {build_s:.0f} s, batch {bench.batch_size}, prompt {bench.prompt_tokens}, "
          f"{bench.new_tokens} new tokens, {bench.threads} thread(s) (0: all), "
          f"{task.rounds} interleaved rounds x {bench.repeats} repeat(s), measured in "
          f"{measure_s:.0f} s, load average {load_before:.2f} -> "
          f"{load['host_load_avg_1m_after']:.2f}\n")
    table = summary_table(results)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\n{SYNTHETIC_NOTE}")
    extra = {"weights": "synthetic", "validation_batch": batch,
             "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
             "cpus": os.cpu_count(), "model": spec.name, "dtype": task.dtype,
             "layers": spec.n_layers, "model_layers": full.n_layers,
             "d_model": spec.d_model, "d_ffn": spec.d_ffn, "batch": bench.batch_size,
             "prompt_tokens": bench.prompt_tokens, "new_tokens": bench.new_tokens,
             "threads": bench.threads, "rounds": task.rounds, "repeats": bench.repeats,
             "measure_s": measure_s, **load}
    for i, (key, value) in enumerate(extra.items()):
        table.insert(i, key, value)
    out = Path(task.out) if task.out else results_dir() / "calibration" / f"{EXPERIMENT}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():  # one file for every run: the 3-runs-out-of-3 check reads them all
        table = pd.concat([pd.read_csv(out), table], ignore_index=True)
    table.to_csv(out, index=False)
    print(f"-> {out} (appended)")
    tracking = cfg.tracking
    if getattr(tracking, "experiment", None) == "validation_local":
        tracking = dataclasses.replace(tracking, experiment=EXPERIMENT)
    tracker = build(tracking)
    for v in results:
        with tracker.run(f"validate-synthetic-{spec.name}-{v.engine}-{v.hardware_variant}",
                         tags={"validation": "true", "weights": "synthetic", "measured": "true",
                               "hardware_variant": v.hardware_variant,
                               "validation_batch": batch}):
            tracker.log_params({"model": spec.name, "engine": v.engine,
                                "bench": as_container(bench), "task": as_container(task),
                                "validation": {"hardware_variant": v.hardware_variant}})
            calibration = v.hardware.meta.get("calibration", {})
            tracker.log_metrics({
                **v.measured, **v.simulated, **v.errors, **load,
                "ops_attention": v.ops.attention,
                "ops_ffn": v.ops.ffn_dense or v.ops.ffn_sparse, "ops_token": v.ops.lm_head,
                "sim_cpu_sparse_call_us": calibration.get("calibrated_sparse_call_us", 0.0),
                "hw_cpu_gflops": (v.hardware.cpu.effective_flops or 0) / 1e9,
                **{f"hw_{k}": val for k, val in v.hardware.summary().items()}})
    return results
