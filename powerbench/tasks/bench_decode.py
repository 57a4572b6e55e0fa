"""`powerbench bench-decode`: dense vs sparse decoders side by side (engine.bench_decode).

With `task.synthetic_model=<model>` (a model yaml with a `spec`, e.g. opt_6_7b) the
decoders run that real shape with SYNTHETIC seeded random weights (`task.dtype`,
`task.layers`, `powerbench.engine.synthetic`) and active sets replayed from the synthetic
profile's trace: only the speed is meaningful. It writes results/decode_realsize.csv, with
the achieved GB/s set against this machine's DRAM read bandwidth measured in the same run.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container, group_config
from powerbench.engine import build_prompt_batch
from powerbench.engine.bench_decode import build_engines, format_table, run_decode_bench
from powerbench.evaluation.predictor_stage import prepare_predictors
from powerbench.paths import results_dir
from powerbench.tasks.config import BenchDecodeTask
from powerbench.tasks.inputs import model_inputs


def bench_decode(task: BenchDecodeTask, cfg: PowerbenchConfig, out_dir: Path) -> list:
    import pandas as pd

    if task.synthetic_model:
        return bench_decode_synthetic(task, cfg)
    inputs = model_inputs(cfg)
    cache, loaded, split, profile = inputs.cache, inputs.loaded, inputs.split, inputs.profile
    names = sorted(set(task.predictors) | ({task.unfused} if task.unfused else set()))
    sets, pbytes = {}, {}
    for name in names:
        predictor = (cfg.predictor if getattr(cfg.predictor, "name", None) == name
                     else group_config("predictor", name))  # predictor=<name> overrides apply
        sets[name], metrics, _ = prepare_predictors(
            predictor, loaded, profile, cache, out_dir / "predictors" / name,
            calibration_texts=split.train, seq_len=cfg.eval.seq_len)
        pbytes[name] = int(metrics.get("predictor_param_bytes", 0))
    if task.unfused:
        pbytes[f"{task.unfused} unfused"] = pbytes[task.unfused]
    engines = build_engines(loaded, task.predictors, sets, task.backend, task.unfused)
    bench = cfg.bench
    ids = build_prompt_batch(loaded.tokenizer, split.heldout, bench.prompt_tokens,
                             bench.batch_size)
    rows = run_decode_bench(ids, engines, pbytes, task.rounds, bench.new_tokens, bench.threads)
    print(f"\n{loaded.spec.name}, batch {bench.batch_size}, prompt {bench.prompt_tokens}, "
          f"{bench.new_tokens} new tokens, {rows[0].threads} thread(s), {task.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.2f} (measured on this machine's CPU)\n")
    print(format_table(rows))
    out = Path(task.out) if task.out else results_dir() / "decode_cpu.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([asdict(r) for r in rows]).to_csv(out, index=False)
    print(f"\n-> {out}")
    tracker = build(cfg.tracking)
    with tracker.run(f"bench-decode-{loaded.spec.name}", tags={"measured": "true"}):
        tracker.log_params({"model": loaded.spec.name, "bench": as_container(bench),
                            "task": as_container(task)})
        for r in rows:
            key = r.predictor.replace(" ", "_")
            tracker.log_metrics({f"{key}_decode_tokens_per_s": r.decode_tokens_per_s,
                                 f"{key}_speedup_vs_dense": r.speedup_vs_dense,
                                 f"{key}_ffn_us_per_call": r.ffn_us_per_call})
        tracker.log_artifact(out)
    return rows


SYNTHETIC_NOTE = ("synthetic weights: only speed is meaningful (seeded random weights; the "
                  "tokens they produce are not; sparse active sets replayed from the synthetic "
                  "activation profile's trace)")


def bench_decode_synthetic(task: BenchDecodeTask, cfg: PowerbenchConfig) -> list:
    """Dense vs sparse on a real shape with synthetic weights (see the module docstring)."""
    import pandas as pd

    from powerbench.engine.bench_decode import build_synthetic_engines
    from powerbench.ops.bandwidth import cpu_read_bandwidth
    from powerbench.tasks.inputs import synthetic_inputs
    from powerbench.threads import torch_threads

    assert task.synthetic_model is not None
    bench = cfg.bench
    inputs = synthetic_inputs(
        task.synthetic_model, task.layers, task.synthetic_overrides, task.dtype, task.seed,
        bench, announce=lambda full, spec: print(
            f"{SYNTHETIC_NOTE}\nbuilding {spec.name}: {spec.n_layers} of {full.n_layers} "
            f"layers, d_model {spec.d_model}, d_ffn {spec.d_ffn}, vocab {spec.vocab_size}, "
            f"{task.dtype}"))
    full, spec, weights, build_s = inputs.full, inputs.spec, inputs.weights, inputs.build_s
    profile, ids = inputs.trace, inputs.ids
    engines, pbytes = build_synthetic_engines(weights, profile, task.backend,
                                              task.predictor_rank, task.seed,
                                              task.torch_linear_baseline)
    load_before = os.getloadavg()[0]
    with torch_threads(bench.threads):  # the reference: read before and after, the best kept
        before = cpu_read_bandwidth()
    rows = run_decode_bench(ids, engines, pbytes, task.rounds, bench.new_tokens, bench.threads)
    with torch_threads(bench.threads):
        after = cpu_read_bandwidth()
    dram = max(before, after, key=lambda b: b.gbps)
    load_after = os.getloadavg()[0]
    weight_gb = sum(t.numel() * t.element_size() for t in _tensors(weights)) / 1e9
    print(f"\n{spec.name} shape (synthetic weights), {task.dtype}, {spec.n_layers} of "
          f"{full.n_layers} layers (layers kept from the profile: {profile.layer_ids}), "
          f"{weight_gb:.2f} GB of weights built in {build_s:.0f} s, batch {bench.batch_size}, "
          f"prompt {bench.prompt_tokens}, {bench.new_tokens} new tokens, {rows[0].threads} "
          f"thread(s), {task.rounds} rounds, load average {load_before:.2f} -> {load_after:.2f}; "
          f"DRAM read bandwidth {dram.gbps:.1f} GB/s ({dram.method}, same threads, best of "
          f"{before.gbps:.1f} before and {after.gbps:.1f} after the rounds)\n")
    print(format_table(rows))
    print(f"\n{SYNTHETIC_NOTE}")
    print("weights read per token / DRAM read bandwidth (median round; fastest round):")
    for r in rows:
        best = _best_gbps(r)
        print(f"  {r.predictor:<20} {r.achieved_gbps:6.2f} GB/s = "
              f"{r.achieved_gbps / dram.gbps:6.1%}; {best:6.2f} GB/s = {best / dram.gbps:6.1%}")
    frame = pd.DataFrame([asdict(r) for r in rows])
    extra = {"weights": "synthetic", "model": spec.name, "dtype": task.dtype,
             "layers": spec.n_layers, "model_layers": full.n_layers, "d_model": spec.d_model,
             "d_ffn": spec.d_ffn, "token_sparsity": spec.stats.token_sparsity
             if spec.stats else None, "prompt_tokens": bench.prompt_tokens,
             "new_tokens": bench.new_tokens, "dram_gbps": dram.gbps, "dram_method": dram.method,
             "dram_gbps_before": before.gbps, "dram_gbps_after": after.gbps,
             "load_avg_before": load_before, "load_avg_after": load_after}
    for i, (key, value) in enumerate(extra.items()):
        frame.insert(i, key, value)
    frame["bandwidth_fraction"] = frame["achieved_gbps"] / dram.gbps
    frame["achieved_gbps_best"] = [_best_gbps(r) for r in rows]
    frame["bandwidth_fraction_best"] = frame["achieved_gbps_best"] / dram.gbps
    out = Path(task.out) if task.out else results_dir() / "decode_realsize.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False)
    print(f"\n-> {out}")
    tracker = build(cfg.tracking)
    with tracker.run(f"bench-decode-synthetic-{spec.name}",
                     tags={"measured": "true", "weights": "synthetic"}):
        tracker.log_params({"model": spec.name, "bench": as_container(bench),
                            "task": as_container(task)})
        tracker.log_metrics({"dram_gbps": dram.gbps})
        for r in rows:
            key = r.predictor.replace(" ", "_").replace("+", "_")
            tracker.log_metrics({f"{key}_decode_tokens_per_s": r.decode_tokens_per_s,
                                 f"{key}_speedup_vs_dense": r.speedup_vs_dense,
                                 f"{key}_ffn_us_per_call": r.ffn_us_per_call,
                                 f"{key}_achieved_gbps": r.achieved_gbps})
        tracker.log_artifact(out)
    return rows


def _best_gbps(row: Any) -> float:
    """Achieved GB/s of a row's fastest round (weights read per token x its tokens/s)."""
    return row.weight_mb_per_token * 1e6 * row.decode_tokens_per_s_best / row.batch / 1e9


def _tensors(w: Any) -> list[Any]:
    """Every distinct weight tensor of a DecoderWeights (shared ones once)."""
    import torch

    seen: dict[int, Any] = {}
    stack = [w]
    while stack:
        node = stack.pop()
        if isinstance(node, torch.Tensor):
            seen.setdefault(id(node), node)
        elif isinstance(node, list):
            stack.extend(node)
        elif hasattr(node, "__dataclass_fields__"):
            stack.extend(getattr(node, f) for f in node.__dataclass_fields__)
    return list(seen.values())
