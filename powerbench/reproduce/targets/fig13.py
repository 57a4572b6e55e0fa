"""Fig. 13: end-to-end speed with INT4 weights on PC-High and PC-Low (SIMULATED).
Sweeps: conf/experiment/fig13.yaml (each PC has its own model set). The scored row counts
output tokens over prompt + generation time; beside it, not scored, the counting
PowerInfer's maintainers state for the paper's speeds (issue #150; see fig10)."""

from __future__ import annotations

from pathlib import Path

from powerbench.figures.e2e import e2e_runs, plot_speed, write_figure
from powerbench.figures.runs import FigureOutput
from powerbench.reproduce.target import POWERINFER_PAPER, Published, Target, stat
from powerbench.reproduce.targets.fig10 import table, with_prompt_tokens_counted

SOURCE = POWERINFER_PAPER.format("abstract and Fig. 13 text")


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """INT4 on PC-High and PC-Low, input 64, one panel per PC; the CSV also carries the
    maintainers' counting (with_prompt_tokens_counted)."""
    frame = with_prompt_tokens_counted(
        e2e_runs("fig13", tracking_uri, how_to_run="powerbench reproduce fig13"))
    return write_figure("fig13", frame, lambda t, p: plot_speed(
        t, p, "hardware", "Fig. 13, INT4"), out_dir)


TARGET = Target(
    name="fig13", figure=figure, experiment="fig13", table=table,
    published=(
        Published("PC-High INT4 PowerInfer average tokens/s (4 models x outputs 8/128/512)",
                  13.20, stat("powerinfer_tokens_per_s", hardware="pc_high"), SOURCE,
                  calibration=True),
        Published("PC-High INT4 PowerInfer average tokens/s, (prompt + output tokens) over "
                  "prompt + generation time", 13.20,
                  stat("powerinfer_prompt_and_output_tokens_per_s", hardware="pc_high"),
                  SOURCE + "; counting: PowerInfer issue #150 (maintainers)", scored=False),
    ))
