"""PowerInfer-2's ablation (its Fig. 14) on the OnePlus 12 profile, Bamboo-7B INT4 with half
of the FFN in flash (SIMULATED). Each step adds one mechanism to the previous one
(conf/experiment/system/pi2_*.yaml):

    Baseline      neuron-level sparse decode with predictors; a static resident set (the
                  most frequent neurons pinned, no dynamic cache), one read per matrix
                  (no bundles), compute waits for its reads, prompt on the CPU
    +Bundle       gate, up and down of a neuron stored together: one read      (bundle=all)
    +NeuronCache  the segmented cache: hot part pinned, cold part neuron-level LRU
                  (hot_share 0.5)
    +Pipeline     the cluster-level I/O-compute pipeline             (simulator.pipeline)
    +XPU          the NPU next to the CPU: the prompt's dense pass on the NPU (the cost
                  model's phone decode runs on the CPU clusters only)  (prefill_unit npu)

Sweep: conf/experiment/pi2_ablation.yaml.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.phone import NOTE
from powerbench.figures.runs import FigureOutput, column, find_simulated_runs, latest
from powerbench.figures.simulated import pyplot, save_figure
from powerbench.reproduce.target import Target

# (label, (bundle, hot_share, pipeline, prefill unit)) of each cumulative step, in order
STEPS = (("Baseline", ("none", 1.0, False, "cpu")),
         ("+Bundle", ("all", 1.0, False, "cpu")),
         ("+NeuronCache", ("all", 0.5, False, "cpu")),
         ("+Pipeline", ("all", 0.5, True, "cpu")),
         ("+XPU", ("all", 0.5, True, "npu")))
METRICS = ("sim_decode_tokens_per_s", "sim_prefill_tokens_per_s", "sim_flash_hit_rate",
           "sim_flash_ms_per_token")


def _flag(value: object) -> bool:
    return str(value).lower() in ("true", "1", "1.0")


def step_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (hardware, model, step) in step order: decode and prefill tokens/s and
    each step's decode speedup over the baseline."""
    keys = zip(column(runs, "params.solver.bundle"),
               pd.to_numeric(column(runs, "params.solver.hot_share", np.nan), errors="coerce"),
               column(runs, "params.simulator.pipeline").map(_flag),
               column(runs, "params.simulator.prefill_unit"), strict=True)
    labels = {k: label for label, k in STEPS}
    frame = pd.DataFrame({
        "hardware": column(runs, "params.hardware.name"),
        "model": column(runs, "params.model.name"),
        "step": [labels.get((str(b), float(h), p, str(u))) for b, h, p, u in keys],
        "start_time": runs["start_time"]})
    for name in METRICS:
        frame[name] = pd.to_numeric(column(runs, f"metrics.{name}", np.nan))
    frame = latest(frame[frame.step.notna()], ["hardware", "model", "step"])
    order = {label: i for i, (label, _) in enumerate(STEPS)}
    frame = frame.assign(_o=frame.step.map(order)).sort_values(["hardware", "model", "_o"])
    base = frame[frame.step == STEPS[0][0]].set_index(["hardware", "model"])
    frame["decode_speedup_vs_baseline"] = [
        row.sim_decode_tokens_per_s / base.sim_decode_tokens_per_s.get((row.hardware,
                                                                        row.model), np.nan)
        for row in frame.itertuples()]
    return frame.drop(columns=["_o", "start_time"]).reset_index(drop=True)


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "pi2_ablation") -> FigureOutput:
    table = step_table(find_simulated_runs(experiment, tracking_uri, simulator="phone"))
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (metric, label) in zip(axes, (("sim_decode_tokens_per_s", "decode tokens/s"),
                                          ("sim_prefill_tokens_per_s", "prefill tokens/s")),
                                   strict=True):
        x = np.arange(len(table))
        ax.bar(x, table[metric].fillna(0), color="#1f77b4")
        for xi, v in zip(x, table[metric], strict=True):
            if np.isfinite(v):
                ax.text(xi, v * 1.02, f"{v:.3g}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, table.step, fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    models = ", ".join(sorted(set(table.model))) or "no runs"
    fig.suptitle(f"PowerInfer-2 ablation, {models} on {', '.join(sorted(set(table.hardware)))}"
                 f", cumulative steps, {NOTE}", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return save_figure("pi2_ablation", table, fig, out_dir)


TARGET = Target(name="pi2_ablation", figure=figure, experiment="pi2_ablation")
