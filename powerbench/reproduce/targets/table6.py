"""Table 6: predictor sizes, SIMULATED for the paper models (the adaptive sizing rule on
their synthetic profiles), MEASURED for our trained tiny_relu. Sweep:
conf/experiment/table6_predictors.yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput, column, latest
from powerbench.figures.simulated import (
    finished_runs,
    numbers,
    pyplot,
    save_figure,
    table_png,
)
from powerbench.reproduce.target import Target

TABLE6_COLUMNS = ["model", "source", "sizing", "weight_dtype", "model_params", "predictor_mb",
                  "predictor_param_share_pct", "predictor_rank_mean", "predictor_recall"]
SIMULATED_PREDICTOR = {"bytes": "metrics.sim_predictor_bytes",
                       "share": "metrics.sim_predictor_param_share",
                       "rank": "metrics.sim_predictor_rank_mean"}
MEASURED_PREDICTOR = {"bytes": "metrics.predictor_param_bytes",
                      "share": "metrics.predictor_param_share",
                      "rank": "metrics.predictor_mean_rank",
                      "recall": "metrics.predictor_recall"}


def table6_table(runs: pd.DataFrame) -> pd.DataFrame:
    """A SIMULATED row per run (the simulator's sizing; NaN where the run predates those
    metrics) and a MEASURED row per run with trained predictors (our models with weights)."""
    base = pd.DataFrame({"model": column(runs, "params.model.name"),
                         "weight_dtype": column(runs, "params.model.weight_dtype"),
                         # which predictor sizing the run used (conf/predictor option)
                         "sizing": column(runs, "params.predictor.name", "none"),
                         "model_params": pd.to_numeric(column(runs, "metrics.model_params",
                                                              np.nan)),
                         "start_time": runs["start_time"]}, index=runs.index)
    parts = []
    for source, names in (("SIMULATED", SIMULATED_PREDICTOR), ("MEASURED", MEASURED_PREDICTOR)):
        values = numbers(runs, names)
        part = base.assign(source=source,
                           predictor_mb=values["bytes"] / 1e6,
                           predictor_param_share_pct=100 * values["share"],
                           predictor_rank_mean=values["rank"],
                           predictor_recall=values.get("recall", np.nan))
        if source == "MEASURED":  # only runs that trained predictors
            part = part[values["bytes"].notna()]
        else:  # only simulated runs
            part = part[column(runs, "params.simulator.name") == "cost_model"]
        parts.append(part)
    table = latest(pd.concat(parts), ["model", "weight_dtype", "source", "sizing"])
    if table.empty:
        return pd.DataFrame(columns=TABLE6_COLUMNS)
    return table.sort_values(["source", "model_params", "model"])[TABLE6_COLUMNS] \
        .reset_index(drop=True)


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "table6_predictors") -> FigureOutput:
    """Paper table 6: adaptive predictor sizes per model (share of the model's parameters)."""
    table = table6_table(finished_runs(experiment, tracking_uri,
                               f"powerbench --multirun experiment={experiment}"))
    if table.empty:
        raise LookupError(f"no simulated or predictor-training runs in {experiment!r}")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.32 * len(table)))
    table_png(ax, table)
    ax.set_title("Table 6 predictor sizes: SIMULATED = the cost model's adaptive sizing for "
                 "shape-only paper models; MEASURED = predictors trained on our tiny_relu "
                 "(NaN: metric not logged by that run)", fontsize=8)
    fig.tight_layout()
    return save_figure("table6", table, fig, out_dir)


TARGET = Target(name="table6", figure=figure, experiment="table6_predictors")
