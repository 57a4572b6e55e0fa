"""Fig. 10: end-to-end speed on PC-High, FP16, PowerInfer vs llama.cpp (SIMULATED).
Sweep: conf/experiment/fig10.yaml."""

from __future__ import annotations

from pathlib import Path

from powerbench.figures.e2e import e2e_from_runs, speed_figure
from powerbench.figures.runs import FigureOutput
from powerbench.reproduce.target import POWERINFER_PAPER, Published, Target, stat

SOURCE = POWERINFER_PAPER.format("Fig. 10 text")


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """PC-High FP16: OPT-30B/66B, Falcon(ReLU)-40B, LLaMA(ReGLU)-70B; inputs 64/128."""
    return speed_figure("fig10", "Fig. 10, PC-High FP16", "prompt_tokens", tracking_uri,
                        out_dir)


TARGET = Target(
    name="fig10", figure=figure, experiment="fig10", table=e2e_from_runs,
    published=(
        Published("PowerInfer average tokens/s (4 models x outputs 8/128/512, input 64)", 8.32,
                  stat("powerinfer_tokens_per_s", prompt_tokens=64), SOURCE, calibration=True),
        Published("PowerInfer max tokens/s (input 64)", 16.06,
                  stat("powerinfer_tokens_per_s", "max", prompt_tokens=64), SOURCE,
                  calibration=True),
        Published("average speedup over llama.cpp (input 64)", 7.23,
                  stat("speedup", prompt_tokens=64), SOURCE, calibration=True),
        Published("peak speedup over llama.cpp (input 64; paper: Falcon(ReLU)-40B)", 11.69,
                  stat("speedup", "max", prompt_tokens=64), SOURCE, calibration=True),
    ))
