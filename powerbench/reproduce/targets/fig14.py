"""Fig. 14: generation speed vs batch size 1-32 on PC-High, Falcon(ReLU)-40B FP16,
PowerInfer vs llama.cpp (SIMULATED). Sweep: conf/experiment/fig14_batch.yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput
from powerbench.figures.simulated import (
    LLAMACPP,
    POWERINFER,
    SIM_KEYS,
    SIMULATED_NOTE,
    pyplot,
    save_figure,
    side_by_side,
    simulated_runs,
)
from powerbench.reproduce.target import Target

PREFIX = {POWERINFER: "powerinfer", LLAMACPP: "llamacpp"}


def fig14_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per (hardware, model, dtype, prompt, output, batch): both systems' tokens/s + speedup."""
    wide = side_by_side(tidy, PREFIX, SIM_KEYS)
    wide["speedup"] = wide.powerinfer_tokens_per_s / wide.llamacpp_tokens_per_s
    wide["decode_speedup"] = wide.powerinfer_decode_tokens_per_s / wide.llamacpp_decode_tokens_per_s
    return wide.sort_values(["hardware", "model", "weight_dtype", "batch_size"]) \
        .reset_index(drop=True)


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "fig14_batch") -> FigureOutput:
    """End-to-end tokens/s (all sequences of the batch) vs batch size."""
    table = fig14_table(simulated_runs(experiment, tracking_uri))
    plt = pyplot()
    groups = list(table.groupby(["hardware", "model", "weight_dtype"], sort=False))
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
    for ax, ((hardware, model, dtype), rows) in zip(axes[0], groups, strict=True):
        for system, color in ((LLAMACPP, "#9e9e9e"), (POWERINFER, "#1f77b4")):
            ax.plot(rows.batch_size, rows[f"{PREFIX[system]}_tokens_per_s"], "o-",
                    color=color, label=f"{system} (simulated)")
        for _, row in rows.iterrows():
            if np.isfinite(row.speedup):
                ax.annotate(f"{row.speedup:.1f}x", (row.batch_size, row.powerinfer_tokens_per_s),
                            textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(rows.batch_size, [str(int(b)) for b in rows.batch_size])
        ax.set_xlabel("batch size")
        ax.set_ylabel("end-to-end tokens/s (whole batch)")
        ax.set_title(f"{model} {dtype} on {hardware}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    prompt, new = int(table.prompt_tokens.iloc[0]), int(table.new_tokens.iloc[0])
    fig.suptitle(f"Fig. 14 batch sizes, {SIMULATED_NOTE}; prompt {prompt}, output {new}; "
                 "labels: PowerInfer speedup", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return save_figure("fig14", table, fig, out_dir)


TARGET = Target(name="fig14", figure=figure, experiment="fig14_batch")
