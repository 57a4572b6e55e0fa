"""Fig. 17: the predictors' share of the inference time on PC-Low, OPT-6.7B/13B/30B, FP16,
PowerInfer (SIMULATED): `sim_predictor_time_share`, the predictor time on the critical path
over the prompt and decode time. Sweep: conf/experiment/fig17_predictor_time.yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput
from powerbench.figures.simulated import (
    SIMULATED_NOTE,
    pyplot,
    save_figure,
    simulated_frame,
    simulated_runs,
)
from powerbench.reproduce.target import POWERINFER_PAPER, Published, Target, stat

COLUMNS = ["hardware", "model", "weight_dtype", "prompt_tokens", "new_tokens", "system",
           "tokens_per_s", "predictor_time_share"]


def fig17_table(tidy: pd.DataFrame) -> pd.DataFrame:
    rows = tidy[tidy.system == "PowerInfer"]
    return rows.sort_values(["hardware", "model"])[COLUMNS].reset_index(drop=True)


def table_from_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return fig17_table(simulated_frame(runs))


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "fig17_predictor_time") -> FigureOutput:
    table = fig17_table(simulated_runs(experiment, tracking_uri))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(len(table))
    share = 100 * table.predictor_time_share.to_numpy(dtype=float)
    ax.bar(x, np.nan_to_num(share), color="#ff7f0e", label="predictors")
    for xi, v in zip(x, share, strict=True):
        if np.isfinite(v):
            ax.text(xi, v + 0.2, f"{v:.1f}%", ha="center", va="bottom", fontsize=8)
    ax.axhline(10, color="grey", lw=0.8, ls="--", label="paper: under 10%")
    ax.set_xticks(x, table.model, fontsize=8)
    ax.set_ylabel("predictor share of the inference time (%)")
    ax.legend(fontsize=7)
    ax.set_title(f"Fig. 17 predictor time, {SIMULATED_NOTE}", fontsize=8)
    fig.tight_layout()
    return save_figure("fig17", table, fig, out_dir)


TARGET = Target(
    name="fig17", figure=figure, experiment="fig17_predictor_time", table=table_from_runs,
    published=(Published("largest predictor share of the inference time (paper: under 10%)",
                         0.10, stat("predictor_time_share", "max"),
                         POWERINFER_PAPER.format("Fig. 17 text"), absolute=True,
                         upper_bound=True),))
