"""`powerbench bench-operators`: sparse operators vs torch dense, side by side (ops.bench)."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

from powerbench.build import build
from powerbench.config import PowerbenchConfig
from powerbench.ops.bench import (
    QUICK,
    OperatorBenchConfig,
    load_average,
    run_benchmark,
    run_params,
    write_outputs,
)
from powerbench.ops.bench_report import format_table, metrics_of
from powerbench.paths import results_dir
from powerbench.tasks.config import BenchOperatorsTask
from powerbench.threads import torch_threads


def operator_bench_config(task: BenchOperatorsTask) -> OperatorBenchConfig:
    """The benchmark's own config from the task's options (unset options: its defaults)."""
    cfg = replace(QUICK if task.quick else OperatorBenchConfig(), device=task.device)
    chosen = {"shapes": task.shapes, "dtypes": task.dtypes, "batches": task.batches,
              "sparsities": task.sparsities, "ops": task.ops, "backends": task.backends}
    cfg = replace(cfg, **{k: tuple(v) for k, v in chosen.items() if v})
    timing = {k: v for k, v in asdict(task.timing).items() if v is not None}
    cfg = replace(cfg, timing=replace(cfg.timing, **timing))
    return replace(cfg, bandwidth_mb=task.bandwidth_mb) if task.bandwidth_mb else cfg


def bench_operators(task: BenchOperatorsTask, cfg: PowerbenchConfig, out_dir: Path) -> list:
    bench = operator_bench_config(task)
    results = Path(task.out_dir) if task.out_dir else results_dir()
    tag = task.tag if task.tag is not None else ("_quick" if task.quick else "")
    with torch_threads(task.threads):
        started, load_before = time.perf_counter(), load_average()
        rows, bandwidth = run_benchmark(bench, log=lambda line: print(line, flush=True))
        elapsed = time.perf_counter() - started
        print(format_table(rows))
        outputs = write_outputs(rows, results, bench.device, tag, plot=task.plot)
        params = run_params(bench, bandwidth, task.quick, elapsed, load_before)
    print(f"# {len(rows)} rows in {elapsed:.0f} s; load before {load_before}, "
          f"after {params['load_after']}; wrote {', '.join(str(p) for p in outputs)}")
    tracker = build(cfg.tracking)
    with tracker.run(f"operators_{bench.device}{tag}", tags={"measured": "true"}):
        tracker.log_params(params)
        tracker.log_metrics(metrics_of(rows))
        for path in outputs:
            tracker.log_artifact(path)
    if tracker.enabled:
        print(f"# logged to MLflow experiment '{tracker.experiment}', run {tracker.run_id}")
    return rows
