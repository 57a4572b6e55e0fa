"""`powerbench hybrid-local`: engine=hybrid MEASURED on this machine's GPU + CPU, beside its
simulated twin.

The experiment's model (default tiny_relu) runs with attention, KV cache and the hot
neurons on the GPU (sparse_cuda) and the cold neurons on the CPU (sparse_cpu), concurrently
per layer. The placement comes from the experiment's solver (default greedy) on the `local`
profile (measured here, GPU included) whose free GPU memory is capped at
`task.gpu_budget_mb` so that the model does NOT fit: otherwise every neuron would go to the
GPU and nothing would be hybrid. Prints and logs (MLflow experiment `hybrid_local`) the
measured tokens/s and GPU/CPU neuron-load split, the simulated ones, and sim_error_pct,
through the measurement harness (one table, CSV and JSON in the run directory, one MLflow
run, skip-if-finished; `task.publish=true` also writes results/hybrid_local/).
Needs a CUDA device (stops with the message without one).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from powerbench.config import PowerbenchConfig
from powerbench.engine import build_engine, build_prompt_batch, run_engine
from powerbench.engine.hybrid import require_cuda
from powerbench.hardware import load_hardware
from powerbench.measure.harness import Report, run_benchmark
from powerbench.measure.op_counts import count_ops
from powerbench.measure.twin import BYTES, compare
from powerbench.predictor import build_predictors
from powerbench.simulator import simulate
from powerbench.simulator.config import PrefillConfig, PrefillMode, SimulatorConfig
from powerbench.solver import solve
from powerbench.tasks.config import HybridLocalTask
from powerbench.tasks.inputs import model_inputs

SHOWN = ["decode_tokens_per_s", "sim_decode_tokens_per_s", "sim_error_pct",
         "prefill_tokens_per_s", "sim_prefill_tokens_per_s", "sim_prefill_error_pct",
         "hybrid_gpu_neuron_load_share", "sim_gpu_ffn_load_share",
         "gpu_neuron_load_share", "hybrid_cpu_ffn_ms_per_call",
         "hybrid_gpu_resident_neuron_share"]


def cap_gpu(hardware, budget_bytes: float):
    """The profile with the accelerator's usable memory limited to `budget_bytes`."""
    tier_name = hardware.gpu.memory
    tier = hardware.memories[tier_name]
    capped = replace(tier, capacity_bytes=tier.reserved_bytes + budget_bytes)
    return replace(hardware, memories={**hardware.memories, tier_name: capped})


def hybrid_local(task: HybridLocalTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    try:
        require_cuda()
    except RuntimeError as err:  # no GPU here: say so, without a traceback
        raise SystemExit(str(err)) from None
    return run_benchmark(cfg, out_dir, lambda: measure(task, cfg), task.publish)


def measure(task: HybridLocalTask, cfg: PowerbenchConfig) -> Report:
    inputs = model_inputs(cfg)
    cache, loaded, split, profile = inputs.cache, inputs.loaded, inputs.split, inputs.profile
    hardware = cap_gpu(load_hardware(cfg.hardware, cache_dir=cfg.cache_dir),
                       task.gpu_budget_mb * 1e6)
    dtype = cfg.engine.dtype or "fp16"
    placement = solve(cfg.solver, loaded.spec, profile, hardware, weight_dtype=dtype)
    predictors = (build_predictors(cfg.predictor, loaded, profile, cache)
                  if cfg.predictor is not None else None)
    measured = run_engine(cfg.engine, loaded, split.heldout, cfg.bench, placement=placement,
                          predictors=predictors)
    with torch.inference_mode():
        decoder = build_engine(cfg.engine).build_decoder(loaded, placement=placement,
                                                         predictors=predictors)
        ids = build_prompt_batch(loaded.tokenizer, split.heldout, 8, cfg.bench.batch_size)
        ops = count_ops(decoder, ids.to(decoder.device), sparse=True)  # structure, not time
    # our engine runs the prompt through HybridFFN too
    twin = SimulatorConfig(kv_bytes_per_value=BYTES[dtype], activation_bytes=BYTES[dtype],
                           gpu_ops=ops, cpu_ops=ops,
                           prefill=PrefillConfig(mode=PrefillMode.hybrid))
    sim = simulate(twin, loaded.spec, profile, placement, hardware, predictors=predictors,
                   bench=cfg.bench)
    errors = compare(measured.metrics, sim.metrics, cfg.bench.new_tokens, cfg.bench.batch_size)
    metrics = {**measured.metrics, **sim.metrics, **errors,
               **placement.metrics(profile), "gpu_budget_mb": task.gpu_budget_mb}
    row = {"system": f"hybrid {cfg.solver.name}",
           **{k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}}
    return Report(
        study="hybrid_local", name=f"hybrid_local_{loaded.spec.name}", rows=[row],
        key=("system",), columns=("system", *[k for k in SHOWN if k in row]),
        title=f"engine=hybrid measured beside its twin: {loaded.spec.name}, placement "
              f"{cfg.solver.name} with {task.gpu_budget_mb} MB of GPU memory "
              f"({hardware.description})",
        params={"model": loaded.spec.name, "solver": cfg.solver.name,
                "gpu_budget_mb": task.gpu_budget_mb, "dtype": dtype},
        notes=["sim_*: the cost model for the same run on the `local` profile (GPU capped to "
               "the budget); sim_error_pct against the measured median."])
