"""`powerbench bench-operators`: sparse operators vs the best dense kernel, side by side
(powerbench.ops.bench); writes results/operators_<device>/operators<tag>.csv and .png and
one MLflow run with the machine facts (CPU model, ISA path, load before and after)."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

from powerbench.build import build
from powerbench.config import PowerbenchConfig
from powerbench.ops.bench import QUICK, OperatorBenchConfig, run_benchmark
from powerbench.ops.bench_report import (
    format_table,
    load_average,
    machine_facts,
    metrics_of,
    write_outputs,
)
from powerbench.paths import results_dir
from powerbench.tasks.config import BenchOperatorsTask
from powerbench.threads import torch_threads


def operator_bench_config(task: BenchOperatorsTask) -> OperatorBenchConfig:
    """The benchmark's own config from the task's options (unset options: its defaults)."""
    cfg = replace(QUICK if task.quick else OperatorBenchConfig(), device=task.device)
    chosen = {"shapes": task.shapes, "dtypes": task.dtypes, "batches": task.batches,
              "sparsities": task.sparsities, "ops": task.ops, "backends": task.backends,
              "isas": task.isas}
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
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        rows, bandwidth = run_benchmark(bench, log=lambda line: print(line, flush=True))
        elapsed, load_after = time.perf_counter() - started, load_average()
        isa = next((r.isa for r in rows if r.backend == "ours_dense"), "")
        facts = machine_facts(bench.device, isa)
    print(f"# {stamp}, {elapsed:.0f} s; " + ", ".join(f"{k} {v}" for k, v in facts.items())
          + f"; read probe {bandwidth.gbps:.1f} GB/s ({bandwidth.method}); "
          f"load before {load_before}, after {load_after}")
    print(format_table(rows))
    outputs = write_outputs(rows, results, bench.device, tag, plot=task.plot)
    print(f"# wrote {', '.join(str(p) for p in outputs)}")
    params = {**facts, "started": stamp, "quick": task.quick, "elapsed_s": round(elapsed, 1),
              "bandwidth_gbps": round(bandwidth.gbps, 2), "bandwidth_method": bandwidth.method,
              "load_before": load_before, "load_after": load_after,
              "shapes": ",".join(bench.shapes), "dtypes": ",".join(bench.dtypes),
              "batches": ",".join(map(str, bench.batches)),
              "sparsities": ",".join(map(str, bench.sparsities))}
    tracker = build(cfg.tracking)
    with tracker.run(f"operators_{bench.device}{tag}", tags={"measured": "true"}):
        tracker.log_params(params)
        tracker.log_metrics(metrics_of(rows))
        for path in outputs:
            tracker.log_artifact(path)
    if tracker.enabled:
        print(f"# logged to MLflow experiment '{tracker.experiment}', run {tracker.run_id}")
    return rows
