"""`powerbench validate`: measured engines vs their simulated twins on `hardware=local`.

For each engine in `task.engines` (default `dense` and `sparse_cpu`) on the experiment's
model (default `tiny_relu`): measure it in `task.rounds` rounds with calibrations of the
local profile's CPU rates before, between and after them, simulate its twin (see
powerbench.measure.twin), log one MLflow run per (engine, hardware variant) with the
measured metrics, the sim_* metrics and the errors, and redraw results/validation_local.*.
conf/task/validate.yaml sets the defaults: hardware=local, solver=all_cpu,
predictor=fixed (sparse engines), bench.repeats=3, experiment `validation_local`.
With `task.synthetic_model=<model>` (e.g. opt_6_7b) it validates real-size shapes with
SYNTHETIC weights instead: powerbench.tasks.validate_synthetic.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import torch

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container, group_config
from powerbench.engine.base import TORCH_DTYPES
from powerbench.hardware import load_hardware
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.measure.calibration import calibrate_local
from powerbench.measure.twin import EngineValidation, summary_table, validate_engine
from powerbench.model.spec import WeightDType
from powerbench.predictor import build_predictors
from powerbench.solver import solve
from powerbench.tasks.config import ValidateTask
from powerbench.tasks.inputs import model_inputs


def engine_predictor(cfg: PowerbenchConfig, engine: str) -> object | None:
    """The predictor config a sparse engine runs with: the experiment's, stored in the
    model's compute dtype (the fused operator reads it in that dtype); none for dense."""
    if engine == "dense" or cfg.predictor is None:
        return None
    if hasattr(cfg.predictor, "weight_dtype"):
        return dataclasses.replace(cfg.predictor, weight_dtype=WeightDType(cfg.model.dtype))
    return cfg.predictor


def validate(task: ValidateTask, cfg: PowerbenchConfig, out_dir: Path
             ) -> list[EngineValidation]:
    if task.synthetic_model:  # real-size shapes, synthetic weights: speed only
        from powerbench.tasks.validate_synthetic import validate_synthetic

        return validate_synthetic(task, cfg)
    inputs = model_inputs(cfg)
    cache, loaded, split, profile = inputs.cache, inputs.loaded, inputs.split, inputs.profile
    local = load_hardware(cfg.hardware)
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
    tracker = build(cfg.tracking)
    results: list[EngineValidation] = []
    batch = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"  # this invocation's runs
    for name in task.engines:
        engine_cfg = group_config("engine", name)
        predictor = engine_predictor(cfg, name)
        predictors = (build_predictors(predictor, loaded, profile, cache)
                      if predictor is not None else None)
        load_before = os.getloadavg()[0]
        runs = validate_engine(engine_cfg, loaded, split.heldout, bench, profile, placement,
                               local, predictors,
                               calibrate=recalibrate if task.calibrate else None,
                               rounds=task.rounds)
        load = {"host_load_avg_1m_before": load_before,
                "host_load_avg_1m_after": os.getloadavg()[0]}
        for v in runs:
            log_validation(tracker, cfg, engine_cfg, predictor, v, load, batch)
            results.append(v)
    print(summary_table(results).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if task.figure and tracker.enabled:
        from powerbench.figures.validation import validation_local

        out = validation_local(tracking_uri=tracker.uri)
        print(f"\n-> {out.csv}, {out.png}")
    return results


def log_validation(tracker, cfg: PowerbenchConfig, engine_cfg, predictor,
                   v: EngineValidation, load: dict[str, float], batch: str) -> None:
    """One MLflow run: the engine's measured metrics, its twin's sim_* metrics, errors."""
    with tracker.run(f"validate-{v.engine}-{v.hardware_variant}",
                     tags={"validation": "true", "hardware_variant": v.hardware_variant,
                           "measured": "true", "validation_batch": batch}):
        tracker.log_params({**as_container(dataclasses.replace(
            cfg, engine=engine_cfg, predictor=predictor))})
        tracker.log_params({"validation": {"hardware_variant": v.hardware_variant}})
        calibration = v.hardware.meta.get("calibration", {})
        tracker.log_metrics({**v.measured, **v.simulated, **v.errors,
                             "ops_attention": v.ops.attention,
                             "ops_ffn": v.ops.ffn_dense or v.ops.ffn_sparse,
                             "ops_token": v.ops.lm_head,
                             "sim_cpu_sparse_call_us":
                                 calibration.get("calibrated_sparse_call_us", 0.0),
                             **load,
                             "hw_cpu_gflops": (v.hardware.cpu.effective_flops or 0) / 1e9,
                             "hw_cpu_attention_gflops":
                                 (v.hardware.cpu.effective_attention_flops or 0) / 1e9,
                             **{f"hw_{k}": val for k, val in v.hardware.summary().items()}})
