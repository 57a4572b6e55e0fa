"""Fig. 13: end-to-end speed with INT4 weights on PC-High and PC-Low (SIMULATED).
Sweeps: conf/experiment/fig13.yaml (each PC has its own model set)."""

from __future__ import annotations

from pathlib import Path

from powerbench.figures.e2e import e2e_from_runs, speed_figure
from powerbench.figures.runs import FigureOutput
from powerbench.reproduce.target import POWERINFER_PAPER, Published, Target, stat


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """INT4 on PC-High and PC-Low, input 64, one panel per PC."""
    return speed_figure("fig13", "Fig. 13, INT4", "hardware", tracking_uri, out_dir)


TARGET = Target(
    name="fig13", figure=figure, experiment="fig13", table=e2e_from_runs,
    published=(
        Published("PC-High INT4 PowerInfer average tokens/s (4 models x outputs 8/128/512)",
                  13.20, stat("powerinfer_tokens_per_s", hardware="pc_high"),
                  POWERINFER_PAPER.format("abstract and Fig. 13 text"), calibration=True),
    ))
