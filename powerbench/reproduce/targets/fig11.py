"""Fig. 11: end-to-end speed on PC-Low, FP16, PowerInfer vs llama.cpp (SIMULATED).
Sweep: conf/experiment/fig11.yaml."""

from __future__ import annotations

from pathlib import Path

from powerbench.figures.e2e import e2e_from_runs, speed_figure
from powerbench.figures.runs import FigureOutput
from powerbench.reproduce.target import POWERINFER_PAPER, Published, Target, stat

SOURCE = POWERINFER_PAPER.format("Fig. 11 text")


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """PC-Low FP16: Bamboo-7B, OPT-13B/30B, LLaMA2(ReGLU)-13B; inputs 64/128."""
    return speed_figure("fig11", "Fig. 11, PC-Low FP16", "prompt_tokens", tracking_uri,
                        out_dir)


TARGET = Target(
    name="fig11", figure=figure, experiment="fig11", table=e2e_from_runs,
    published=(
        Published("average speedup over llama.cpp (input 64)", 4.71,
                  stat("speedup", prompt_tokens=64), SOURCE, calibration=True),
        Published("peak speedup over llama.cpp (input 64)", 7.06,
                  stat("speedup", "max", prompt_tokens=64), SOURCE, calibration=True),
    ))
