"""Fig. 15: the ablation on PC-High, FP16, Bamboo-7B and Falcon(ReLU)-40B (SIMULATED).

Each step is the previous one plus one part of PowerInfer (conf/experiment/system/*.yaml):

    llama.cpp  layer offload (-ngl), dense compute, no predictor          system=llamacpp
    +PO        PowerInfer's predictors and neuron-aware offloading inside llama.cpp: hot
               neurons on the GPU by the simpler policy (greedy top-k by activation
               frequency), predictor-selected decode, llama.cpp's own prompt path (dense
               GEMMs on the GPU, host weights streamed)                    system=po
    +Engine    the hybrid engine's neuron-aware operators for the prompt too  system=po_engine
    +Policy    the ILP placement instead of greedy (full PowerInfer)       system=powerinfer

The cost model always runs the CPU and GPU parts of a split layer concurrently, so the
engine's concurrency is in every step from +PO on (no switch for llama.cpp's sequential
execution yet). Sweep: conf/experiment/fig15_ablation.yaml.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import (
    FigureOutput,
    column,
    find_simulated_runs,
    latest,
    simulated_columns,
)
from powerbench.figures.simulated import (
    SIM_KEYS,
    SIM_METRICS,
    SIMULATED_NOTE,
    pyplot,
    save_figure,
    side_by_side,
)
from powerbench.reproduce.target import Target

# (label, column prefix, (solver, compute mode, prefill mode)) of each step, in order
ABLATION = (("llama.cpp", "llamacpp", ("layer_offload", "dense", "gpu_stream")),
            ("+PO", "po", ("greedy", "sparse", "gpu_stream")),
            ("+Engine", "engine", ("greedy", "sparse", "hybrid")),
            ("+Policy", "policy", ("ilp", "sparse", "hybrid")))
NOTE = ("+PO = predictors + greedy hot/cold neuron placement in llama.cpp (sparse decode, "
        "llama.cpp's dense prompt path); +Engine = the neuron-aware operators for the prompt "
        "too; +Policy = ILP placement (full PowerInfer). The cost model runs split layers' "
        "CPU and GPU parts concurrently in every step.")


def step_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (SIM_KEYS, step): the latest run of each ablation step."""
    frame = pd.DataFrame(simulated_columns(runs))
    prefill = column(runs, "params.simulator.prefill.mode", "gpu_stream").fillna("gpu_stream")
    steps = {sm: p for _, p, sm in ABLATION}
    frame["system"] = [steps.get((s, m, str(f))) for s, m, f in
                       zip(frame.solver, frame["mode"], prefill, strict=True)]
    for name, col in SIM_METRICS.items():
        frame[name] = pd.to_numeric(column(runs, col, np.nan))
    frame = frame[frame.system.notna()]
    return latest(frame, SIM_KEYS + ["system"]).drop(columns="start_time")


def fig15_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per model: each ablation step's tokens/s and its speedup over llama.cpp."""
    wide = side_by_side(tidy, {p: p for _, p, _ in ABLATION}, SIM_KEYS)
    for _, p, _ in ABLATION[1:]:
        wide[f"{p}_speedup"] = wide[f"{p}_tokens_per_s"] / wide.llamacpp_tokens_per_s
    return wide.sort_values(["hardware", "weight_dtype", "model"]).reset_index(drop=True)


def table_from_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return fig15_table(step_frame(runs))


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "fig15_ablation") -> FigureOutput:
    """Tokens/s of each ablation step per model (speedup over llama.cpp on top)."""
    table = table_from_runs(find_simulated_runs(experiment, tracking_uri))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 2.6 * len(table)), 5.5))
    x = np.arange(len(table))
    width = 0.8 / len(ABLATION)
    colors = ("#9e9e9e", "#ffbb78", "#98df8a", "#1f77b4")
    for i, ((label, p, _), color) in enumerate(zip(ABLATION, colors, strict=True)):
        values = table[f"{p}_tokens_per_s"].to_numpy(dtype=float)
        pos = x + (i - (len(ABLATION) - 1) / 2) * width
        ax.bar(pos, np.nan_to_num(values), width, label=label, color=color)
        speedups = (table[f"{p}_speedup"].to_numpy(dtype=float) if p != "llamacpp"
                    else np.full(len(table), np.nan))
        for xi, v, speed, ok in zip(pos, values, speedups, table[f"{p}_fits"], strict=True):
            text = f"{speed:.1f}x" if np.isfinite(speed) else ("n/a" if not ok else "")
            ax.text(xi, max(np.nan_to_num(v), 1e-3) * 1.05, text, ha="center", va="bottom",
                    fontsize=6, rotation=90)
    ax.set_xticks(x, [f"{m}\n{d}" for m, d in zip(table.model, table.weight_dtype, strict=True)],
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 3)
    ax.set_ylabel("end-to-end tokens/s")
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper right")
    hardware = ", ".join(sorted(table.hardware.dropna().unique()))
    fig.suptitle(f"Fig. 15 ablation on {hardware}, {SIMULATED_NOTE}\nlabels: speedup over "
                 "llama.cpp", fontsize=9)
    fig.text(0.01, 0.01, NOTE, fontsize=6, wrap=True)
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.22, top=0.88)
    return save_figure("fig15", table, fig, out_dir)


TARGET = Target(name="fig15", figure=figure, experiment="fig15_ablation",
                table=table_from_runs)
