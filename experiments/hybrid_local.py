"""engine=hybrid MEASURED on this machine's GPU + CPU, beside its simulated twin (issue #6).

    .venv/bin/python experiments/hybrid_local.py [--gpu-budget-mb 8] [--solver greedy]
        [--predictor fixed] [hydra overrides...]

The trained tiny model (or `model=...`) runs with attention, KV cache and the hot neurons
on the GPU (sparse_cuda) and the cold neurons on the CPU (sparse_cpu), concurrently per
layer. The placement comes from `--solver` on the `local` profile (measured here, GPU
included) whose free GPU memory is capped at `--gpu-budget-mb` so that the model does NOT
fit: otherwise every neuron would go to the GPU and nothing would be hybrid. Prints and
logs (MLflow experiment `hybrid_local`) the measured tokens/s and GPU/CPU neuron-load
split, the simulated ones, and sim_error_pct. Needs a CUDA device (stops clearly without).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


def cap_gpu(hardware, budget_bytes: float):
    """The profile with the accelerator's usable memory limited to `budget_bytes`."""
    tier_name = hardware.gpu.memory
    tier = hardware.memories[tier_name]
    capped = replace(tier, capacity_bytes=tier.reserved_bytes + budget_bytes)
    return replace(hardware, memories={**hardware.memories, tier_name: capped})


def main(argv: Sequence[str] | None = None) -> int:
    import torch
    from omegaconf import OmegaConf

    from powerbench.config import compose_config
    from powerbench.dataset import load_texts
    from powerbench.engine import build_engine, build_prompt_batch, run_engine
    from powerbench.engine.hybrid import require_cuda
    from powerbench.hardware import load_hardware
    from powerbench.paths import cache_dir
    from powerbench.pipeline import build
    from powerbench.profiling.store import load_or_profile
    from powerbench.simulator import simulate
    from powerbench.simulator.config import PrefillMode, SimulateConfig
    from powerbench.simulator.stage import hardware_node
    from powerbench.simulator.validate import compare, count_ops
    from powerbench.solver import solve
    from powerbench.tracking import Tracker

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu-budget-mb", type=float, default=8.0)
    parser.add_argument("--solver", default="greedy")
    parser.add_argument("--predictor", default="fixed", help="fixed | adaptive | oracle | none")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    try:
        require_cuda()
    except RuntimeError as err:  # no GPU here: say so, without a traceback
        raise SystemExit(str(err)) from None
    predictor = [] if args.predictor == "none" else [f"predictor={args.predictor}"]
    cfg = compose_config(["model=tiny_relu", "hardware=local", f"solver={args.solver}",
                    "engine=hybrid", "tracking.experiment=hybrid_local", "solver.gpu_buffer_gb=0",
                    "solver.cpu_buffer_gb=0", *predictor, *args.overrides])
    cache = cache_dir(cfg.cache_dir)
    loaded = build(cfg.model, cache_dir=cache)
    split = load_texts(cfg.dataset)
    profile, _ = load_or_profile(loaded, split.train, OmegaConf.to_object(cfg.profiling),
                                 split.name, cache)
    hardware = cap_gpu(load_hardware(hardware_node(cfg)), args.gpu_budget_mb * 1e6)
    dtype = cfg.engine.dtype or "fp16"
    placement = solve(cfg.solver, loaded.spec, profile, hardware, weight_dtype=dtype)
    predictors = None
    if cfg.get("predictor") is not None:
        from powerbench.predictor import build_predictors

        predictors = build_predictors(cfg.predictor, loaded, profile, cache)
    measured = run_engine(cfg.engine, loaded, split.heldout, cfg.bench, placement=placement,
                          predictors=predictors)
    engine = build_engine(cfg.engine)
    with torch.inference_mode():
        decoder = engine.build_decoder(loaded, placement=placement, predictors=predictors)
        ids = build_prompt_batch(loaded.tokenizer, split.heldout, 8, cfg.bench.batch_size)
        ops = count_ops(decoder, ids.to(decoder.device), sparse=True)  # structure, not time
    bytes_per = {"fp16": 2.0, "bf16": 2.0, "fp32": 4.0}[dtype]
    twin = SimulateConfig(kv_bytes_per_value=bytes_per, activation_bytes=bytes_per,
                          gpu_ops=ops, cpu_ops=ops)
    twin.prefill.mode = PrefillMode.hybrid  # our engine runs the prompt through HybridFFN too
    sim = simulate(twin, loaded.spec, profile, placement, hardware, predictors=predictors,
                   bench=cfg.bench)
    errors = compare(measured.metrics, sim.metrics, cfg.bench.new_tokens, cfg.bench.batch_size)
    metrics = {**measured.metrics, **sim.metrics, **errors,
               **placement.metrics(profile), "gpu_budget_mb": args.gpu_budget_mb}
    tracker = Tracker(uri=cfg.tracking.uri, experiment=cfg.tracking.experiment,
                      enabled=cfg.tracking.enabled)
    with tracker.run(f"hybrid-{loaded.spec.name}-{args.solver}", tags={"measured": "true"}):
        tracker.log_params(OmegaConf.to_container(cfg, resolve=True))
        tracker.log_metrics(metrics)
    shown = ["decode_tokens_per_s", "sim_decode_tokens_per_s", "sim_error_pct",
             "prefill_tokens_per_s", "sim_prefill_tokens_per_s", "sim_prefill_error_pct",
             "hybrid_gpu_neuron_load_share", "sim_gpu_neuron_load_share",
             "gpu_neuron_load_share", "hybrid_cpu_ffn_ms_per_call",
             "hybrid_gpu_resident_neuron_share"]
    print(f"device: {hardware.description}; placement {args.solver} with "
          f"{args.gpu_budget_mb} MB of GPU memory")
    for key in shown:
        if key in metrics:
            print(f"  {key:36s} {metrics[key]:.4g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
