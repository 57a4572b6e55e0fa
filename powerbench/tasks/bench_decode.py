"""`powerbench bench-decode`: dense vs sparse decoders side by side (engine.bench_decode)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container, group_config
from powerbench.engine import build_prompt_batch
from powerbench.engine.bench_decode import build_engines, format_table, run_decode_bench
from powerbench.paths import results_dir
from powerbench.predictor import prepare_predictors
from powerbench.tasks.config import BenchDecodeTask
from powerbench.tasks.inputs import model_inputs


def bench_decode(task: BenchDecodeTask, cfg: PowerbenchConfig, out_dir: Path) -> list:
    import pandas as pd

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
