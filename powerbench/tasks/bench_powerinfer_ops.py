"""`powerbench bench-powerinfer-ops`: PowerInfer's own CPU FFN operators (its ggml, compiled
here from a PowerInfer checkout) beside ours, each against its dense product and one plain
read, on this machine (powerbench.measure.powerinfer_ops).

    powerbench bench-powerinfer-ops task.powerinfer_dir=/path/to/PowerInfer
        [task.isas=[native,avx2]] [task.threads=[1,2,4,8]] [task.publish=true]
        [task.shape=4096x4096 task.dtype=fp32]    # PowerInfer's Fig. 16 product

Reports through the measurement harness (study `operators_cpu`, report `powerinfer_ops`, or
`powerinfer_ops_<shape>_<dtype>` for another shape or dtype); `task.publish=true` also
writes results/operators_cpu/<report>.{md,csv}. Needs a C compiler and a PowerInfer
checkout (git clone https://github.com/SJTU-IPADS/PowerInfer); without one it stops with
that message.
"""

from __future__ import annotations

from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.hardware.facts import usable_cpus
from powerbench.measure.harness import Report, run_benchmark
from powerbench.measure.powerinfer_ops import (
    PowerInferOpsConfig,
    PowerInferSourceError,
    Workload,
    check_checkout,
    powerinfer_ops_report,
)
from powerbench.paths import cache_dir
from powerbench.tasks.config import BenchPowerInferOpsTask
from powerbench.threads import doubling_counts


def bench_powerinfer_ops(task: BenchPowerInferOpsTask, cfg: PowerbenchConfig,
                         out_dir: Path) -> list[Report]:
    try:
        checkout = check_checkout(task.powerinfer_dir)  # before the harness starts a job
    except PowerInferSourceError as err:
        raise SystemExit(str(err)) from None
    d_model, d_ffn = task.dims
    work = Workload(d_model=d_model, d_ffn=d_ffn, dtype=task.dtype, layers=task.layers,
                    passes=task.passes, reps=task.reps, sparsities=tuple(task.sparsities))
    bench = PowerInferOpsConfig(
        checkout=checkout, build_root=cache_dir() / "powerinfer_ops",
        isas=tuple(task.isas), threads=tuple(task.threads or doubling_counts(usable_cpus())),
        work=work, rounds=task.rounds, ours=task.ours)
    return run_benchmark(cfg, out_dir, lambda: powerinfer_ops_report(bench), task.publish)
