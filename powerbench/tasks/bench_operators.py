"""`powerbench bench-operators`: sparse operators vs the best dense kernel, side by side
(powerbench.ops.bench).

Reports through the measurement harness (study `operators_<device>`): the table with the
machine (CPU model, ISA), the load window and the command, a CSV and JSON plus the speedup
PNG in the run directory, one MLflow run; `task.publish=true` also writes
results/operators_<device>/. The notes give the read probe, the ISA path the compiled
kernels ran, and each batch-1 contender against the operator targets.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.measure.harness import Report, run_benchmark
from powerbench.ops.bench import QUICK, OperatorBenchConfig
from powerbench.ops.bench import run_benchmark as measure_operators
from powerbench.ops.bench_report import (
    ceiling_notes,
    huge_page_note,
    out_buffer_note,
    plot_speedup,
    record,
    target_notes,
)
from powerbench.ops.bench_timing import timing_notes
from powerbench.tasks.config import BenchOperatorsTask
from powerbench.threads import torch_threads

KEY = ("backend", "isa", "op", "shape", "dtype", "batch", "sparsity_pct")
SHOWN = ("op", "shape", "dtype", "batch", "sparsity_pct", "label", "time_us", "dense_kernel",
         "dense_time_us", "speedup", "speedup_p25", "speedup_p75", "ideal_speedup",
         "achieved_gbps", "dense_gbps", "dense_fraction", "bandwidth_fraction", "ceiling_gbps",
         "ceiling_fraction", "ceiling_speedup")
METRICS = ("time_us", "dense_time_us", "speedup", "speedup_p25", "speedup_p75",
           "achieved_gbps", "dense_gbps", "dense_fraction", "ceiling_gbps", "ceiling_fraction",
           "ceiling_speedup")


def operator_bench_config(task: BenchOperatorsTask) -> OperatorBenchConfig:
    """The benchmark's own config from the task's options (unset options: its defaults)."""
    cfg = replace(QUICK if task.quick else OperatorBenchConfig(), device=task.device)
    chosen = {"shapes": task.shapes, "dtypes": task.dtypes, "batches": task.batches,
              "sparsities": task.sparsities, "ops": task.ops, "backends": task.backends,
              "isas": task.isas, "variants": task.variants}
    cfg = replace(cfg, **{k: tuple(v) for k, v in chosen.items() if v})
    timing = {k: v for k, v in asdict(task.timing).items() if v is not None}
    cfg = replace(cfg, timing=replace(cfg.timing, **timing), huge_pages=task.huge_pages,
                  out_buffers=task.out_buffers)
    return replace(cfg, bandwidth_mb=task.bandwidth_mb) if task.bandwidth_mb else cfg


def bench_operators(task: BenchOperatorsTask, cfg: PowerbenchConfig,
                    out_dir: Path) -> list[Report]:
    return run_benchmark(cfg, out_dir, lambda: measure(task, out_dir), task.publish)


def measure(task: BenchOperatorsTask, out_dir: Path) -> Report:
    bench = operator_bench_config(task)
    name = "operators" + (task.tag if task.tag is not None else ("_quick" if task.quick else ""))
    with torch_threads(task.threads) as threads:
        rows, bandwidth = measure_operators(bench, log=lambda line: print(line, flush=True))
    isa = next((r.isa for r in rows if r.backend == "ours_dense"), "") or "-"
    figure = []
    if task.plot:
        figure.append(plot_speedup(rows, Path(out_dir) / f"{name}.png"))
    dense = sorted({r.dense_kernel for r in rows})
    return Report(
        study=f"operators_{bench.device}", name=name, rows=[record(r) for r in rows],
        key=KEY if not bench.variants else ("variant", *KEY),  # metric names as before
        columns=SHOWN, metrics=METRICS,
        title=f"sparse operators vs the best dense kernel ({bench.device}, measured)",
        notes=[f"read probe (STREAM-like sum, all threads): {bandwidth.gbps:.1f} GB/s "
               f"({bandwidth.method}); compiled CPU kernels on ISA path {isa}; {threads} "
               f"thread(s)",
               f"dense = the faster of torch_dense (torch.matmul) and ours_dense (our dense "
               f"kernel) per op, dtype and batch; faster here: {', '.join(dense)}",
               "speedup = dense time / sparse time within each round (the two calls side "
               "by side), the median over the rounds, with its quartiles speedup_p25 / _p75 "
               "(the rounds' spread); time_us and dense_time_us are each call's own median; "
               "ideal = 1/(1-s); dense_fraction = achieved GB/s / the dense kernel's GB/s, "
               "paired as the speedup (speedup x the share of the dense kernel's bytes "
               "touched)",
               *ceiling_notes(rows, bandwidth.gbps), huge_page_note(rows, bench.huge_pages),
               out_buffer_note(bench.out_buffers),
               *timing_notes(bench.device, bench.timing), *target_notes(rows)],
        params={"task": {k: v for k, v in vars(task).items() if not k.startswith("_")},
                "isa": isa, "bandwidth_gbps": round(bandwidth.gbps, 2),
                "bandwidth_method": bandwidth.method},
        extra_files=figure)
