"""PowerInfer-2 prefill tokens/s with the prompt on the NPU vs on the CPU, OnePlus 12
profile (SIMULATED). Sweep: conf/experiment/pi2_prefill.yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from powerbench.figures.phone import NOTE, phone_runs
from powerbench.figures.runs import FigureOutput
from powerbench.figures.simulated import pyplot, save_figure
from powerbench.reproduce.target import Target


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
                experiment: str = "pi2_prefill") -> FigureOutput:
    tidy = phone_runs(experiment, tracking_uri)
    table = tidy.pivot_table(index=["hardware", "model"], columns="prefill_unit",
                             values="sim_prefill_tokens_per_s", aggfunc="last").reset_index()
    table.columns.name = None
    if {"npu", "cpu"} <= set(table.columns):
        table["npu_speedup"] = table.npu / table.cpu
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(len(table))
    for i, unit in enumerate(u for u in ("cpu", "npu") if u in table):
        ax.bar(x + (i - 0.5) * 0.4, table[unit], 0.4, label=f"prefill on {unit}")
    ax.set_xticks(x, table.model + "\n" + table.hardware, fontsize=7)
    ax.set_ylabel("prefill tokens/s")
    ax.legend(fontsize=7)
    ax.set_title(f"PowerInfer-2 prefill, NPU vs CPU, {NOTE}", fontsize=8)
    fig.tight_layout()
    return save_figure("pi2_prefill", table, fig, out_dir)


TARGET = Target(name="pi2_prefill", figure=figure, experiment="pi2_prefill")
