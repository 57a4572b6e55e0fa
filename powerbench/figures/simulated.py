"""What the paper-figure targets share: simulated runs as a tidy frame, systems side by
side, a figure written as <out_dir>/<name>.csv (content-hashed) and .png, tables drawn.

    simulated_runs(experiment, uri)  one row per latest cost-model run (SIM_KEYS, system,
                                     solver, mode, fits, SIM_METRICS)
    side_by_side(tidy, prefixes, keys)  systems as column prefixes
    save_figure(name, table, fig, out_dir)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import (
    FigureOutput,
    column,
    find_simulated_runs,
    latest,
    search_runs,
    simulated_columns,
)
from powerbench.figures.stamp import paper_results_dir, write_stamped_csv

POWERINFER, LLAMACPP = "PowerInfer", "llama.cpp"
SIM_KEYS = ["hardware", "model", "weight_dtype", "prompt_tokens", "new_tokens", "batch_size"]
SIM_METRICS = {
    "tokens_per_s": "metrics.sim_end_to_end_tokens_per_s",
    "decode_tokens_per_s": "metrics.sim_decode_tokens_per_s",
    "prefill_tokens_per_s": "metrics.sim_prefill_tokens_per_s",
    "gpu_neuron_load_share": "metrics.sim_gpu_neuron_load_share",
    "predictor_time_share": "metrics.sim_predictor_time_share",
}
SIMULATED_NOTE = "SIMULATED (cost model on a hardware profile, not measured)"


def simulated_runs(experiment: str, tracking_uri: str | None) -> pd.DataFrame:
    """One row per simulated run of `experiment`: SIM_KEYS, solver, mode, system, fits and
    SIM_METRICS (the latest re-run of each combination). Raises LookupError when none."""
    return simulated_frame(find_simulated_runs(experiment, tracking_uri))


def simulated_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """`simulated_runs` of a frame of runs as `mlflow.search_runs` returns them."""
    frame = pd.DataFrame(simulated_columns(runs))
    for name, col in SIM_METRICS.items():
        frame[name] = pd.to_numeric(column(runs, col, np.nan))
    return latest(frame, SIM_KEYS + ["system"]).drop(columns="start_time")


def side_by_side(tidy: pd.DataFrame, prefixes: dict[str, str], keys: list[str],
                 metrics: tuple[str, ...] = ("tokens_per_s", "decode_tokens_per_s", "fits")
                 ) -> pd.DataFrame:
    """Systems as column prefixes: one row per `keys`, `<prefix>_<metric>` per system
    (NaN / False where a system has no run)."""
    wide = tidy[keys].drop_duplicates().reset_index(drop=True)
    for system, prefix in prefixes.items():
        part = tidy[tidy.system == system][keys + list(metrics)]
        part = part.rename(columns={m: f"{prefix}_{m}" for m in metrics})
        wide = wide.merge(part, on=keys, how="left")
        if "fits" in metrics:
            wide[f"{prefix}_fits"] = wide[f"{prefix}_fits"].astype("boolean").fillna(False) \
                .astype(bool)
    return wide


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(name: str, table: pd.DataFrame, fig, out_dir: str | Path | None
                ) -> FigureOutput:
    """<out_dir>/<name>.csv from `table` (content-hashed) and .png from the matplotlib
    figure `fig`."""
    plt = pyplot()
    out = Path(out_dir) if out_dir is not None else paper_results_dir()
    out.mkdir(parents=True, exist_ok=True)
    csv, png = out / f"{name}.csv", out / f"{name}.png"
    write_stamped_csv(table, csv)
    fig.savefig(png, dpi=130)
    plt.close(fig)
    return FigureOutput(name, csv, png, table)


def finished_runs(experiment: str, tracking_uri: str | None, command: str) -> pd.DataFrame:
    """Every finished run of `experiment`; LookupError naming `command` when none."""
    runs = search_runs(experiment, tracking_uri)
    if runs.empty:
        raise LookupError(f"no finished runs in MLflow experiment {experiment!r}; run: "
                          f"{command}")
    return runs


def numbers(runs: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
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


def host_cpu(tag: object) -> str:
    """The CPU a run measured on (its `host_cpu` tag, set on every tracked run)."""
    if isinstance(tag, str) and tag:
        return tag
    from powerbench.hardware.facts import cpu_model

    return f"{cpu_model()} (this machine: the run has no host_cpu tag)"
