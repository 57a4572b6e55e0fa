"""PowerInfer-2 decode tokens/s of TurboSparse-Mixtral-47B on the OnePlus 12 vs the DRAM
budget, 7 to 19 GB (SIMULATED). Sweep: conf/experiment/pi2_budget.yaml."""

from __future__ import annotations

from pathlib import Path

from powerbench.figures.phone import bars, decode_table, phone_runs
from powerbench.figures.runs import FigureOutput
from powerbench.reproduce.target import Target


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "pi2_budget") -> FigureOutput:
    table = decode_table(phone_runs(experiment, tracking_uri))
    table["label"] = table.model + "\n" + table.dram_budget_gb.map(lambda b: f"{b:g} GB")
    return bars(table, "label", "decode vs DRAM budget", out_dir, "pi2_budget")


TARGET = Target(name="pi2_budget", figure=figure, experiment="pi2_budget")
