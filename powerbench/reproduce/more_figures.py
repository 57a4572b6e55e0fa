"""Reproduction targets (see powerbench.reproduce.target): paper figures 14, 15, 16, 18 and
tables 6 and 7. The figure functions are in powerbench.figures.paper_more (simulated speed)
and powerbench.figures.paper_tables (measured operators, predictor sizes, accuracy)."""

from __future__ import annotations

import pandas as pd

from powerbench.figures.paper_more import fig14, fig15, fig18, fig18_from_runs, fig18_ratio
from powerbench.figures.paper_tables import fig16, table6, table7
from powerbench.reproduce.target import Published, Target


def opt30b_vs_a100(table: pd.DataFrame) -> float:
    """OPT-30B fp16: PowerInfer on PC-High / A100 end-to-end tokens/s, 1-token input (the
    paper's claim is about the token generation rate: no prompt phase to dilute it)."""
    return fig18_ratio(table, model="opt_30b", prompt_tokens=1)


TARGETS: tuple[Target, ...] = (
    Target(name="fig14", title="Batch sizes 1-32, Falcon(ReLU)-40B fp16 on PC-High",
           figure=fig14, experiment="fig14_batch", quick=("bench.batch_size=1,8",)),
    Target(name="fig15",
           title="Ablation llama.cpp -> +PO -> +Engine -> +Policy on PC-High, fp16",
           figure=fig15, experiment="fig15_ablation", quick=("model=opt_30b",)),
    Target(name="fig16", title="Sparse operators vs dense (measured on this machine's CPU)",
           figure=fig16,
           command=("bench-operators", "task.shapes=[4096x16384]", "task.dtypes=[fp32]",
                    "task.batches=[1]", "task.tag=_headline"),  # the README's headline table
           quick=("task.quick=true",),
           simulated=False),
    Target(name="fig18", title="PowerInfer on PC-High (RTX 4090) vs an A100 80 GB",
           figure=fig18, experiment="fig18_a100", quick=("model=opt_30b",),
           table=fig18_from_runs,
           published=(Published(
               label="OPT-30B fp16: PowerInfer (PC-High) / A100 tokens/s, input 1, output 128",
               value=0.82, ours=opt30b_vs_a100,
               source="PowerInfer section 8 (comparison with A100, Fig. 18 text)",
               calibration=True, tolerance=0.2),)),
    Target(name="table6", title="Predictor sizes (simulated paper models, measured tiny_relu)",
           figure=table6, experiment="table6_predictors",
           quick=("model=opt_30b,tiny_relu_quick",)),
    Target(name="table7", title="Accuracy dense vs sparse (measured on tiny_relu)",
           figure=table7, experiment="table7_accuracy",
           quick=("model=tiny_relu_quick", "eval.max_tokens=2048", "eval.mc_items=20",
                  "bench.new_tokens=8"), simulated=False),
)
