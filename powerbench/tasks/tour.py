"""`powerbench tour` (`make run`): the whole idea of activation-sparse inference in one table.

MEASURED on this machine, on the experiment's model (default `tiny_relu`, trained here):
its FFN sparsity, the trained predictors (recall, share of parameters), dense vs sparse
decode side by side (interleaved rounds, one run), and held-out perplexity and multiple-
choice accuracy dense vs sparse. SIMULATED for a paper-scale model on a hardware profile
(default OPT-30B on pc_high): llama.cpp-style layer offload with dense compute vs
PowerInfer-style placement (ILP) with predictor-selected neurons (the systems of
conf/experiment/system, composed as a sweep would), their GPU share of the neuron load
(all rows and FFN rows only) and tokens/s. One MLflow run holds every number; metrics.json is written first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container, load_config
from powerbench.engine import build_prompt_batch
from powerbench.evaluation.accuracy import run_accuracy_eval
from powerbench.evaluation.predictor_stage import prepare_predictors
from powerbench.hardware import load_hardware
from powerbench.measure.decode_bench import build_engines, run_decode_bench
from powerbench.model.loading import spec_from_config
from powerbench.predictor.sized import quality_from_config, size_predictors
from powerbench.predictor.stats import predictor_layer_bytes
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.simulator import simulate
from powerbench.solver import PlacementInfeasibleError, solve
from powerbench.tasks.config import TourTask
from powerbench.tasks.inputs import model_inputs
from powerbench.tracking import ui_command

# the systems compared on the paper-scale model (conf/experiment/system options) and how
# the summary names them and their placement
SYSTEMS = {"llamacpp": "llama.cpp", "powerinfer": "PowerInfer"}
PLACEMENTS = {"layer_offload": "layer offload", "ilp": "ILP placement",
              "greedy": "greedy placement"}


@dataclass
class SimulatedSystem:
    key: str
    system: str
    tokens_per_s: float
    gpu_neuron_load_share: float  # all weight rows (attention and output rows included)
    gpu_ffn_load_share: float  # activated FFN neurons only


def system_config(key: str, task: TourTask, cfg: PowerbenchConfig) -> PowerbenchConfig:
    """The typed config of system `key` (conf/experiment/system/<key>.yaml) simulated on the
    task's paper-scale model and hardware profile, with this run's bench lengths."""
    return load_config([f"+experiment/system={key}", "simulator=cost_model", "~engine",
                        f"model={task.sim_model}", f"hardware={task.sim_hardware}",
                        "tracking.enabled=false", f"seed={cfg.seed}",
                        f"profiling.trace_tokens={cfg.profiling.trace_tokens}",
                        f"bench.prompt_tokens={cfg.bench.prompt_tokens}",
                        f"bench.new_tokens={cfg.bench.new_tokens}",
                        f"bench.batch_size={cfg.bench.batch_size}"])


def describe(sys_cfg: PowerbenchConfig, key: str) -> str:
    """e.g. 'llama.cpp (layer offload, dense)', from the composed system."""
    placement = PLACEMENTS.get(sys_cfg.solver.name, sys_cfg.solver.name)
    return f"{SYSTEMS[key]} ({placement}, {sys_cfg.simulator.mode.value})"


def simulate_systems(task: TourTask, cfg: PowerbenchConfig) -> list[SimulatedSystem]:
    """Each of SYSTEMS on the task's paper-scale model and hardware profile (cost model)."""
    out = []
    for key in SYSTEMS:
        sys_cfg = system_config(key, task, cfg)
        spec = spec_from_config(sys_cfg.model)
        profile = synthetic_profile(spec, trace_tokens=sys_cfg.profiling.trace_tokens,
                                    seed=sys_cfg.seed)
        hardware = load_hardware(sys_cfg.hardware, cache_dir=cfg.cache_dir)
        predictors = (size_predictors(sys_cfg.predictor, spec, profile,
                                      quality_from_config(sys_cfg.simulator))
                      if sys_cfg.predictor is not None else None)
        context = sys_cfg.bench.prompt_tokens + sys_cfg.bench.new_tokens
        try:
            placement = solve(sys_cfg.solver, spec, profile, hardware,
                              weight_dtype=sys_cfg.model.weight_dtype, context=context,
                              predictor_bytes=predictor_layer_bytes(predictors))
        except PlacementInfeasibleError as err:
            print(f"{key}: {err}")
            continue
        result = simulate(sys_cfg.simulator, spec, profile, placement, hardware, predictors,
                          bench=sys_cfg.bench)
        m = result.metrics
        out.append(SimulatedSystem(key, describe(sys_cfg, key), m["sim_end_to_end_tokens_per_s"],
                                   m["sim_gpu_neuron_load_share"], m["sim_gpu_ffn_load_share"]))
    return out


def tour(task: TourTask, cfg: PowerbenchConfig, out_dir: Path) -> dict[str, float]:
    inputs = model_inputs(cfg)
    loaded, split, profile = inputs.loaded, inputs.split, inputs.profile
    predictors, pmetrics, _ = prepare_predictors(
        cfg.predictor, loaded, profile, inputs.cache, out_dir, calibration_texts=split.train,
        seq_len=cfg.eval.seq_len)
    name = cfg.predictor.name
    engines = build_engines(loaded, [name], {name: predictors}, task.backend, unfused=None)
    ids = build_prompt_batch(loaded.tokenizer, split.heldout, cfg.bench.prompt_tokens,
                             cfg.bench.batch_size)
    rows = {r.predictor: r for r in run_decode_bench(
        ids, engines, {name: int(pmetrics.get("predictor_param_bytes", 0))}, task.rounds,
        cfg.bench.new_tokens, cfg.bench.threads)}
    dense, sparse = rows["none"], rows[name]
    accuracy = run_accuracy_eval(loaded.model, loaded.tokenizer, predictors, split.heldout,
                                 seq_len=cfg.eval.seq_len, max_tokens=task.eval_tokens,
                                 mc_task=cfg.eval.mc_task, mc_items=task.mc_items,
                                 seed=cfg.seed)
    simulated = simulate_systems(task, cfg)
    metrics = {
        "ffn_sparsity": profile.summary()["ffn_sparsity"],
        "predictor_recall": pmetrics["predictor_recall"],
        "predictor_param_share": pmetrics["predictor_param_share"],
        "dense_decode_tokens_per_s": dense.decode_tokens_per_s,
        "sparse_decode_tokens_per_s": sparse.decode_tokens_per_s,
        "decode_speedup_vs_dense": sparse.speedup_vs_dense,
        "ffn_speedup_vs_dense": sparse.ffn_speedup_vs_dense,
        **accuracy.metrics(),
        **{f"sim_{s.key}_tokens_per_s": s.tokens_per_s for s in simulated},
        **{f"sim_{s.key}_gpu_neuron_load_share": s.gpu_neuron_load_share for s in simulated},
        **{f"sim_{s.key}_gpu_ffn_load_share": s.gpu_ffn_load_share for s in simulated},
    }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))  # before tracking
    table = summary(task, loaded.spec, metrics, simulated, dense.rounds)
    print("\n" + table)
    tracker = build(cfg.tracking)
    with tracker.run(f"tour-{loaded.spec.name}", tags={"measured": "true", "simulated": "true"}):
        tracker.log_params({**as_container(cfg)})
        tracker.log_metrics(metrics)
        tracker.log_text(table, "tour.txt")
    print(f"\nresults: {out_dir}/metrics.json")
    if tracker.enabled and not tracker.offline:
        print(f"MLflow run {tracker.run_id} in experiment '{tracker.experiment}'. "
              f"Open the dashboard with:\n  {ui_command(tracker.uri)}")
    return metrics


def summary(task: TourTask, spec, m: dict[str, float], simulated: list[SimulatedSystem],
            rounds: int) -> str:
    lines = [
        f"MEASURED on this machine's CPU: {spec.name} ({spec.total_params / 1e6:.2f} M "
        f"parameters, {spec.n_layers} layers)",
        f"  FFN neurons inactive per token        {100 * m['ffn_sparsity']:.1f}%",
        f"  predictors: recall                    {m['predictor_recall']:.3f} "
        f"({100 * m['predictor_param_share']:.1f}% of the model's parameters)",
        f"  decode tokens/s, dense -> sparse      {m['dense_decode_tokens_per_s']:.0f} -> "
        f"{m['sparse_decode_tokens_per_s']:.0f} ({m['decode_speedup_vs_dense']:.2f}x; FFN "
        f"call {m['ffn_speedup_vs_dense']:.2f}x; medians of {rounds} interleaved rounds)",
        f"  held-out perplexity, dense -> sparse  {m['perplexity_dense']:.1f} -> "
        f"{m['perplexity']:.1f} ({m['perplexity_delta_pct']:+.2f}%)",
    ]
    if m.get("mc_accuracy") is not None and "mc_accuracy_dense" in m:
        lines.append(f"  multiple choice, dense -> sparse      {100 * m['mc_accuracy_dense']:.1f}% "
                     f"-> {100 * m['mc_accuracy']:.1f}% ({int(m['mc_items'])} items)")
    lines.append(f"SIMULATED (cost model): {task.sim_model} on hardware profile "
                 f"'{task.sim_hardware}'")
    for s in simulated:
        lines.append(f"  {s.system:<44s} {s.tokens_per_s:6.2f} tokens/s, GPU share of the "
                     f"neuron load {100 * s.gpu_neuron_load_share:.0f}% of all rows, "
                     f"{100 * s.gpu_ffn_load_share:.0f}% of the FFN rows")
    if len(simulated) == 2 and simulated[0].tokens_per_s > 0:
        lines.append(f"  speedup                                      "
                     f"{simulated[1].tokens_per_s / simulated[0].tokens_per_s:.2f}x")
        lines.append("  (all rows: attention and output rows counted with the FFN neurons; "
                     "FFN rows: activated FFN neurons only. powerbench reproduce fig12 shows "
                     "both for the paper's models)")
    return "\n".join(lines)
