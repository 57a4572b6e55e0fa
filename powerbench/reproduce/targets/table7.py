"""Table 7: accuracy of sparse vs dense inference, MEASURED on our own tiny_relu (the
paper's models cannot run here). Sweep: conf/experiment/table7_accuracy.yaml."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from powerbench.figures.runs import FigureOutput, column, latest
from powerbench.figures.simulated import (
    finished_runs,
    host_cpu,
    numbers,
    pyplot,
    save_figure,
    table_png,
)
from powerbench.reproduce.target import Target

TABLE7_COLUMNS = ["model", "predictor", "perplexity_dense", "perplexity_sparse",
                  "perplexity_delta_pct", "mc_accuracy_dense", "mc_accuracy_sparse",
                  "mc_delta_points", "eval_predictor_recall", "eval_predicted_active_fraction",
                  "eval_true_active_fraction", "predictor_param_share_pct", "eval_tokens",
                  "mc_items", "note"]
TABLE7_NOTE = "MEASURED here on our own model; the paper's models cannot run on this machine"
EVAL_METRICS = {"perplexity_dense": "metrics.perplexity_dense",
                "perplexity_sparse": "metrics.perplexity",
                "mc_accuracy_dense": "metrics.mc_accuracy_dense",
                "mc_accuracy_sparse": "metrics.mc_accuracy",
                "eval_predictor_recall": "metrics.eval_predictor_recall",
                "eval_predicted_active_fraction": "metrics.eval_predicted_active_fraction",
                "eval_true_active_fraction": "metrics.eval_true_active_fraction",
                "predictor_param_share": "metrics.predictor_param_share",
                "eval_tokens": "metrics.eval_tokens", "mc_items": "metrics.mc_items"}


def table7_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (model, predictor): dense and sparse perplexity and MC accuracy and their deltas
    (runs without the eval stage's metrics are left out)."""
    values = numbers(runs, EVAL_METRICS)
    keep = values.perplexity_dense.notna()
    frame = values[keep].assign(model=column(runs, "params.model.name")[keep],
                                predictor=column(runs, "params.predictor.name", "none")[keep]
                                .fillna("none"),
                                start_time=runs.start_time[keep])
    frame = frame.assign(host_cpu=column(runs, "tags.host_cpu")[keep])
    frame = latest(frame, ["model", "predictor"])
    if frame.empty:
        return pd.DataFrame(columns=TABLE7_COLUMNS)
    frame["perplexity_delta_pct"] = 100 * (frame.perplexity_sparse / frame.perplexity_dense - 1)
    frame["mc_delta_points"] = 100 * (frame.mc_accuracy_sparse - frame.mc_accuracy_dense)
    frame["predictor_param_share_pct"] = 100 * frame.predictor_param_share
    frame["note"] = [f"{TABLE7_NOTE}; measured on {host_cpu(c)}"
                     for c in frame.host_cpu]
    return frame.sort_values(["model", "predictor"])[TABLE7_COLUMNS].reset_index(drop=True)


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "table7_accuracy") -> FigureOutput:
    """Paper table 7: accuracy of sparse inference next to dense, MEASURED on tiny_relu."""
    table = table7_table(finished_runs(experiment, tracking_uri,
                               f"powerbench --multirun experiment={experiment}"))
    if table.empty:
        raise LookupError(f"no run in {experiment!r} logged the eval stage's perplexity "
                          "(the eval stage runs with a measured engine: engine=dense)")
    plt = pyplot()
    shown = table.drop(columns=["note", "eval_true_active_fraction"])
    fig, ax = plt.subplots(figsize=(14, 1.1 + 0.35 * len(table)))
    table_png(ax, shown)
    hosts = ", ".join(sorted({n.split("measured on ", 1)[-1] for n in table.note}))
    ax.set_title(f"Table 7 accuracy dense vs sparse (predictor-selected FFN neurons), MEASURED "
                 f"on {hosts}: {TABLE7_NOTE}; MC = offline continuation task",
                 fontsize=8)
    fig.tight_layout()
    return save_figure("table7", table, fig, out_dir)


TARGET = Target(name="table7", figure=figure, experiment="table7_accuracy", simulated=False)
