"""Placement solver scale benchmark: ILP vs greedy at paper scale (issue #5).

OPT-30B, OPT-66B, LLaMA(ReGLU)-70B and OPT-175B synthetic profiles on pc_high and pc_low;
for each, greedy (PowerInfer's released top-k) and the ILP (design section 5) under the
paper's communication rule (`dense`) and its activation-weighted variant (`expected`).
Writes results/solver_scale.csv and results/solver_scale.png and prints the table.

    python experiments/bench_solver.py            # or: powerbench bench-solver
    python experiments/bench_solver.py --models opt_175b --hardware pc_high

Weights are fp16 where the model fits the machine (GPU + CPU), else int4, as PowerInfer
evaluates its largest models. Dense parts get `--dense-gpu-share` of the GPU (default 0.5):
with PowerInfer's dense-first loader (1.0) these models leave the FFN almost no GPU memory
and the ILP is trivial. The machine's load average is recorded per row: on a shared
2-core machine timings are noisy.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import pandas as pd

from powerbench.hardware import load_hardware
from powerbench.hardware.load import conf_node
from powerbench.model.loading import spec_from_config
from powerbench.model.spec import ModelSpec
from powerbench.paths import results_dir
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.solver import PlacementInfeasibleError, solve, solver_config

MODELS = ["opt_30b", "opt_66b", "llama_reglu_70b", "opt_175b"]
HARDWARE = ["pc_high", "pc_low"]
COMMUNICATION = ["dense", "expected"]
GB = 1e9


def pick_dtype(spec: ModelSpec, hw, context: int) -> str:
    """fp16 if weights + KV cache fit GPU + CPU with 10% to spare, else int4."""
    room = hw.gpu_capacity + hw.cpu_capacity
    need = spec.total_bytes("fp16") + spec.kv_cache_bytes(context)
    return "fp16" if 1.1 * need <= room else "int4"


def run_one(spec, profile, hw, dtype, solver, communication, args) -> dict:
    overrides = dict(communication=communication, dense_gpu_share=args.dense_gpu_share,
                     context=args.context)
    if solver == "ilp":
        overrides.update(group_size=args.group_size, time_limit_s=args.time_limit,
                         mip_gap=args.mip_gap, backend=args.backend)
    row = {"model": spec.name, "hardware": hw.name, "weight_dtype": dtype, "solver": solver,
           "communication": communication, "dense_gpu_share": args.dense_gpu_share,
           "layers": spec.n_layers, "neurons_per_layer": spec.neurons_per_layer,
           "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    start = time.perf_counter()
    try:
        p = solve(solver_config(solver, **overrides), spec, profile, hw, weight_dtype=dtype)
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
        load_avg_1m_after=round(os.getloadavg()[0], 2),
    )
    return row


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = frame[frame["objective"].notna()]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, column, label in ((axes[0], "solve_time_s", "solve time (s)"),
                              (axes[1], "gpu_neuron_load_share", "GPU neuron load share")):
        pivot = ok.pivot_table(index=["model", "hardware"], columns=["solver", "communication"],
                               values=column)
        pivot.plot.bar(ax=ax, rot=30, fontsize=7)
        ax.set_ylabel(label)
        ax.set_xlabel("")
        ax.legend(fontsize=7)
    axes[0].axhline(30, color="red", lw=0.8, ls="--")
    fig.suptitle("placement solvers at paper scale (synthetic profiles)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--hardware", nargs="+", default=HARDWARE)
    parser.add_argument("--communication", nargs="+", default=COMMUNICATION)
    parser.add_argument("--dense-gpu-share", type=float, default=0.5)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--mip-gap", type=float, default=0.01)
    parser.add_argument("--backend", default="highs", choices=["highs", "scip"])
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    out = args.out or results_dir() / "solver_scale.csv"
    rows = []
    for model in args.models:
        spec = spec_from_config(conf_node("model", model))
        profile = synthetic_profile(spec)
        for hw_name in args.hardware:
            hw = load_hardware(hw_name)
            dtype = pick_dtype(spec, hw, args.context)
            for communication in args.communication:
                for solver in ("greedy", "ilp"):
                    row = run_one(spec, profile, hw, dtype, solver, communication, args)
                    rows.append(row)
                    print(f"{model:16s} {hw_name:8s} {dtype:4s} {solver:6s} {communication:8s} "
                          f"{row.get('status')}  t={row['solve_time_s']:.2f}s", flush=True)
    frame = pd.DataFrame(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False)
    plot(frame, out.with_suffix(".png"))
    cols = ["model", "hardware", "weight_dtype", "solver", "communication", "ffn_budget_gb",
            "n_binaries", "solve_time_s", "objective", "solver_gap", "bound_gap",
            "gpu_neuron_load_share", "cl_violations", "status", "load_avg_1m_before"]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(frame[[c for c in cols if c in frame]].to_string(index=False))
    print(f"\nwrote {out} and {out.with_suffix('.png')}")
    return frame


if __name__ == "__main__":
    main()
