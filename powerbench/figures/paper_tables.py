"""Paper figure 16 and tables 6 and 7: measured operators, predictor sizes, accuracy.

    fig16():  sparse operators vs torch dense, MEASURED by `powerbench bench-operators`
              (MLflow experiment `operators`, the latest run on one device)
    table6(): predictor sizes, SIMULATED for the paper models, MEASURED for tiny_relu
              (experiment table6_predictors)
    table7(): perplexity and multiple-choice accuracy dense vs sparse, MEASURED on our own
              tiny_relu (experiment table7_accuracy; the paper's models cannot run here)

Each writes <out_dir>/<name>.csv and .png (out_dir default: results/).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.paper_more import _pyplot, write_figure
from powerbench.figures.runs import FigureOutput, column, latest, search_runs


def _runs(experiment: str, tracking_uri: str | None, command: str) -> pd.DataFrame:
    runs = search_runs(experiment, tracking_uri)
    if runs.empty:
        raise LookupError(f"no finished runs in MLflow experiment {experiment!r} "
                          f"({tracking_uri or 'default store'}); run: {command}")
    return runs


def _numbers(runs: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({k: pd.to_numeric(column(runs, c, np.nan)) for k, c in names.items()},
                        index=runs.index)


def table_png(ax, table: pd.DataFrame, digits: int = 4) -> None:
    """`table` drawn as a matplotlib table on `ax` (numbers to `digits` significant)."""
    cells = [[f"{v:.{digits}g}" if isinstance(v, float) else str(v) for v in row]
             for row in table.itertuples(index=False)]
    ax.axis("off")
    drawn = ax.table(cellText=cells or [["(no rows)"] + [""] * (len(table.columns) - 1)],
                     colLabels=[c.replace("_", "\n") for c in table.columns], loc="center",
                     cellLoc="center")
    drawn.auto_set_font_size(False)
    drawn.set_fontsize(7)
    drawn.scale(1.0, 1.4)
    for (row, _), cell in drawn.get_celld().items():
        if row == 0:  # header: one line per word
            cell.set_height(cell.get_height() * 3)


def _host_cpu(tag: object, cpu_model) -> str:
    """The CPU a run measured on (its `host_cpu` tag, set on every tracked run)."""
    if isinstance(tag, str) and tag:
        return tag
    return f"{cpu_model()} (this machine: the run has no host_cpu tag)"


# ---- figure 16: sparse operators (measured) ------------------------------------------------

METRIC_KEY = re.compile(r"^metrics\.(speedup|time_us)/([^/]+)/([^/]+)/([^/]+)/([^/]+)/b(\d+)/s(\d+)$")
FIG16_COLUMNS = ["device", "backend", "op", "shape", "dtype", "batch", "sparsity", "time_us",
                 "dense_time_us", "speedup", "ideal_speedup"]


def operator_rows(run: pd.Series, device: str) -> pd.DataFrame:
    """One bench-operators run's `<speedup|time_us>/<backend>/<op>/<shape>/<dtype>/b<batch>/
    s<percent>` metrics back into rows (dense time = time / speedup)."""
    cells: dict[tuple, dict[str, float]] = {}
    for name, value in run.items():
        match = METRIC_KEY.match(str(name))
        if match and pd.notna(value):
            kind, backend, op, shape, dtype, batch, pct = match.groups()
            cells.setdefault((backend, op, shape, dtype, int(batch), int(pct) / 100), {})[kind] = \
                float(value)
    rows = [dict(device=device, backend=k[0], op=k[1], shape=k[2], dtype=k[3], batch=k[4],
                 sparsity=k[5], time_us=v.get("time_us", np.nan), speedup=v.get("speedup", np.nan))
            for k, v in cells.items()]
    frame = pd.DataFrame(rows, columns=[c for c in FIG16_COLUMNS
                                        if c not in ("dense_time_us", "ideal_speedup")])
    frame["dense_time_us"] = frame.time_us * frame.speedup
    frame["ideal_speedup"] = 1.0 / (1.0 - frame.sparsity)
    frame.loc[frame.backend == "torch_dense", "ideal_speedup"] = 1.0
    return frame[FIG16_COLUMNS].sort_values(["op", "shape", "dtype", "batch", "backend",
                                             "sparsity"]).reset_index(drop=True)


def fig16(tracking_uri: str | None = None, out_dir: str | Path | None = None,
          experiment: str = "operators", device: str = "cpu") -> FigureOutput:
    """Paper figure 16: speedup of the sparse operators over torch dense vs sparsity, from
    the latest `powerbench bench-operators` run on `device` (MEASURED on its CPU)."""
    from powerbench.hardware.facts import cpu_model

    runs = _runs(experiment, tracking_uri, f"powerbench bench-operators task.device={device}")
    runs = runs[column(runs, "params.device") == device]
    if runs.empty:
        raise LookupError(f"no bench-operators run on device {device!r} in MLflow experiment "
                          f"{experiment!r}; run: powerbench bench-operators task.device={device}")
    run = runs.sort_values("start_time").iloc[-1]
    table = operator_rows(run, device)
    if table.empty:
        raise LookupError(f"bench-operators run {run.run_id} logged no speedup/... metrics")
    where = _host_cpu(run.get("tags.host_cpu"), cpu_model)
    table.insert(1, "cpu_model", where)
    plt = _pyplot()
    sparse = table[table.backend != "torch_dense"]
    panels = list(sparse.groupby(["op", "dtype", "batch"], sort=False))
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.5 * max(len(panels), 1), 4),
                             squeeze=False)
    for ax, ((op, dtype, batch), rows) in zip(axes[0], panels, strict=False):
        grid = np.sort(rows.sparsity.unique())
        ax.plot(grid, 1.0 / (1.0 - grid), "k--", lw=1, label="ideal 1/(1-s)")
        ax.axhline(1.0, color="grey", lw=0.8)
        for i, ((backend, shape), line) in enumerate(rows.groupby(["backend", "shape"])):
            ax.plot(line.sparsity, line.speedup, "o-", ms=3, color=f"C{i}",
                    label=f"{backend} {shape}")
        ax.set_yscale("log")
        ax.set_xlabel("sparsity (share of inactive neurons)")
        ax.set_ylabel("speedup over torch dense")
        ax.set_title(f"{op} {dtype} batch {batch}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6)
    fig.suptitle(f"Fig. 16 sparse operators vs dense, MEASURED on {where} ({device}, "
                 f"run {str(run.run_id)[:8]})", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return write_figure("fig16", table, fig, out_dir)


# ---- table 6: predictor sizes --------------------------------------------------------------

TABLE6_COLUMNS = ["model", "source", "weight_dtype", "model_params", "predictor_mb",
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
                         "model_params": pd.to_numeric(column(runs, "metrics.model_params",
                                                              np.nan)),
                         "start_time": runs["start_time"]}, index=runs.index)
    parts = []
    for source, names in (("SIMULATED", SIMULATED_PREDICTOR), ("MEASURED", MEASURED_PREDICTOR)):
        values = _numbers(runs, names)
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
    table = latest(pd.concat(parts), ["model", "weight_dtype", "source"])
    if table.empty:
        return pd.DataFrame(columns=TABLE6_COLUMNS)
    return table.sort_values(["source", "model_params", "model"])[TABLE6_COLUMNS] \
        .reset_index(drop=True)


def table6(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "table6_predictors") -> FigureOutput:
    """Paper table 6: adaptive predictor sizes per model (share of the model's parameters)."""
    table = table6_table(_runs(experiment, tracking_uri,
                               f"powerbench --multirun experiment={experiment}"))
    if table.empty:
        raise LookupError(f"no simulated or predictor-training runs in {experiment!r}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.32 * len(table)))
    table_png(ax, table)
    ax.set_title("Table 6 predictor sizes: SIMULATED = the cost model's adaptive sizing for "
                 "shape-only paper models; MEASURED = predictors trained on our tiny_relu "
                 "(NaN: metric not logged by that run)", fontsize=8)
    fig.tight_layout()
    return write_figure("table6", table, fig, out_dir)


# ---- table 7: accuracy dense vs sparse -----------------------------------------------------

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
    from powerbench.hardware.facts import cpu_model

    values = _numbers(runs, EVAL_METRICS)
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
    frame["note"] = [f"{TABLE7_NOTE}; measured on {_host_cpu(c, cpu_model)}"
                     for c in frame.host_cpu]
    return frame.sort_values(["model", "predictor"])[TABLE7_COLUMNS].reset_index(drop=True)


def table7(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "table7_accuracy") -> FigureOutput:
    """Paper table 7: accuracy of sparse inference next to dense, MEASURED on tiny_relu."""
    table = table7_table(_runs(experiment, tracking_uri,
                               f"powerbench --multirun experiment={experiment}"))
    if table.empty:
        raise LookupError(f"no run in {experiment!r} logged the eval stage's perplexity "
                          "(the eval stage runs with a measured engine: engine=dense)")
    plt = _pyplot()
    shown = table.drop(columns=["note", "eval_true_active_fraction"])
    fig, ax = plt.subplots(figsize=(14, 1.1 + 0.35 * len(table)))
    table_png(ax, shown)
    hosts = ", ".join(sorted({n.split("measured on ", 1)[-1] for n in table.note}))
    ax.set_title(f"Table 7 accuracy dense vs sparse (predictor-selected FFN neurons), MEASURED "
                 f"on {hosts}: {TABLE7_NOTE}; MC = offline continuation task",
                 fontsize=8)
    fig.tight_layout()
    return write_figure("table7", table, fig, out_dir)
