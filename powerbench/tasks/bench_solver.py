"""`powerbench bench-solver`: placement solvers (ILP vs greedy) at paper scale.

The grid is a Hydra sweep: each job solves the placement of one model (`model=`) on one
machine (`hardware=`) with one solver (`solver=`, `solver.communication=`), typed by its
config group like every other run. conf/task/bench_solver.yaml sweeps PowerInfer's
largest models (OPT-30B, OPT-66B, LLaMA(ReGLU)-70B, OPT-175B, synthetic profiles) on
pc_high and pc_low with greedy (PowerInfer's released top-k) and the ILP (PowerInfer
paper, §6) under the paper's communication rule (`dense`) and its activation-weighted
variant (`expected`):

    powerbench -m bench-solver                                    # the whole grid
    powerbench -m bench-solver model=opt_13b solver=greedy,ilp    # a grid of your own
    powerbench bench-solver model=opt_66b hardware=pc_low solver=ilp   # one cell

Each job reports its row through the measurement harness (study `solver`) in its own
directory; at the sweep's end `powerbench.measure.sweep_reports.CollectReports` (a Hydra
callback) collects the jobs into one table, CSV and plot in the sweep directory and one
MLflow run; `task.publish=true` writes that table into results/solver/. A re-run
of the sweep skips finished jobs and still collects the whole grid.

Weights are fp16 where the model fits the machine (GPU + CPU), else int4, as PowerInfer
evaluates its largest models. Dense parts get `solver.dense_gpu_share` 0.5 of the GPU (the
task's yaml): with PowerInfer's dense-first loader (1.0) these models leave the FFN almost
no GPU memory and the ILP is trivial. Each row carries its job's start (UTC) and load
average (the harness's window): on a shared 2-core machine timings are noisy.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from powerbench.config import PowerbenchConfig, as_container
from powerbench.hardware import load_hardware
from powerbench.measure.harness import Report, run_benchmark
from powerbench.model.loading import spec_from_config
from powerbench.model.spec import ModelSpec
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.solver import PlacementInfeasibleError, solve
from powerbench.tasks.config import BenchSolverTask

GB = 1e9


def pick_dtype(spec: ModelSpec, hw, context: int) -> str:
    """fp16 if weights + KV cache fit GPU + CPU with 10% to spare, else int4."""
    room = hw.gpu_capacity + hw.cpu_capacity
    need = spec.total_bytes("fp16") + spec.kv_cache_bytes(context)
    return "fp16" if 1.1 * need <= room else "int4"


def run_one(spec, profile, hw, dtype: str, solver_cfg) -> dict:
    """One solve, timed, as a table row."""
    row = {"model": spec.name, "hardware": hw.name, "weight_dtype": dtype,
           "solver": solver_cfg.name, "communication": str(solver_cfg.communication),
           "dense_gpu_share": solver_cfg.dense_gpu_share, "layers": spec.n_layers,
           "neurons_per_layer": spec.neurons_per_layer}
    start = time.perf_counter()
    try:
        p = solve(solver_cfg, spec, profile, hw, weight_dtype=dtype)
    except PlacementInfeasibleError as err:
        row.update(status=f"infeasible: {err.budget} short by {err.shortfall_bytes / GB:.1f} GB",
                   solve_time_s=time.perf_counter() - start)
        return row
    extra = p.stats.extra
    metrics = p.metrics(profile)
    row.update(
        status=p.stats.status,
        ffn_budget_gb=round(extra.get("ffn_budget_bytes", 0.0) / GB, 3),
        n_binaries=extra.get("n_binaries"),
        solve_time_s=round(p.stats.solve_time_s, 3),
        backend_time_s=round(extra["backend_time_s"], 3) if "backend_time_s" in extra else None,
        objective=round(p.stats.objective, 3),
        solver_gap=p.stats.gap,
        bound_gap=extra.get("bound_gap"),
        source=extra.get("source"),
        gpu_neuron_load_share=round(metrics["gpu_neuron_load_share"], 5),
        cl_min=int(p.min_gpu_neurons.min()), cl_max=int(p.min_gpu_neurons.max()),
        cl_violations=p.cl_violations,
    )
    return row


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = frame[frame["objective"].notna()] if "objective" in frame else frame.iloc[:0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, column, label in ((axes[0], "solve_time_s", "solve time (s)"),
                              (axes[1], "gpu_neuron_load_share", "GPU neuron load share")):
        if not ok.empty:
            pivot = ok.pivot_table(index=["model", "hardware"],
                                   columns=["solver", "communication"], values=column)
            pivot.plot.bar(ax=ax, rot=30, fontsize=7)
            ax.legend(fontsize=7)
        ax.set_ylabel(label)
        ax.set_xlabel("")
    axes[0].axhline(30, color="red", lw=0.8, ls="--")
    fig.suptitle("placement solvers at paper scale (synthetic profiles)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SHOWN = ("model", "hardware", "weight_dtype", "solver", "communication", "ffn_budget_gb",
         "n_binaries", "solve_time_s", "objective", "solver_gap", "bound_gap",
         "gpu_neuron_load_share", "cl_violations", "status", "load_avg_1m_before")


def bench_solver(task: BenchSolverTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    if task.publish and not in_multirun():  # one cell would replace the grid's page
        raise ValueError("task.publish=true publishes the whole grid: run it as a sweep, "
                         "powerbench -m bench-solver task.publish=true")
    # the jobs of a sweep never publish: their collected report does (sweep_reports)
    return run_benchmark(cfg, out_dir, lambda: measure_solver(cfg))


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def measure_solver(cfg: PowerbenchConfig) -> Report:
    """One cell of the grid: the composed model, hardware and solver."""
    if cfg.hardware is None or cfg.solver is None:
        raise ValueError("bench-solver needs hardware=<profile> and solver=<solver> "
                         "(conf/task/bench_solver.yaml sets both)")
    spec = spec_from_config(cfg.model)
    hw = load_hardware(cfg.hardware, cache_dir=cfg.cache_dir)
    dtype = pick_dtype(spec, hw, cfg.solver.context or spec.max_positions)
    row = run_one(spec, synthetic_profile(spec), hw, dtype, cfg.solver)
    print(f"{spec.name:16s} {hw.name:8s} {dtype:4s} {cfg.solver.name:6s} "
          f"{row['communication']:8s} {row.get('status')}  t={row['solve_time_s']:.2f}s",
          flush=True)
    return Report(
        study="solver", name="solver_scale", rows=[row],
        key=("model", "hardware", "solver", "communication"),
        columns=[c for c in SHOWN if c in row or c == "load_avg_1m_before"],  # stamped later
        metrics=("solve_time_s", "objective", "solver_gap", "bound_gap",
                 "gpu_neuron_load_share", "cl_violations"),
        title="placement solvers at paper scale (synthetic profiles)",
        figure="powerbench.tasks.bench_solver.plot", window_columns=True,
        params={"model": spec.name, "hardware": hw.name, "weight_dtype": dtype,
                "solver": as_container(cfg.solver)})
