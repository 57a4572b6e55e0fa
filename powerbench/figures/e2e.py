"""Simulated end-to-end runs, PowerInfer vs llama.cpp: MLflow -> one wide table.

The data layer of the paper's PC figures (powerbench.reproduce.targets.fig10-fig13): `e2e_runs()` reads
the simulated runs of one MLflow experiment, `e2e_table()` puts both systems side by side
per (hardware, model, dtype, prompt length, output length) with the speedups,
`speed_bars()` draws tokens/s bars with the speedup on top, `speed_figure()` one panel
per prompt length or PC, `write_figure()` writes
<out_dir>/<name>.csv (content-hashed) and .png.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import (
    FigureOutput,
    column,
    latest,
    search_runs,
    simulated_columns,
)
from powerbench.figures.stamp import paper_results_dir, write_stamped_csv

POWERINFER, LLAMACPP = "PowerInfer", "llama.cpp"
KEYS = ["hardware", "model", "weight_dtype", "prompt_tokens", "new_tokens"]
METRICS = {
    "tokens_per_s": "metrics.sim_end_to_end_tokens_per_s",
    "decode_tokens_per_s": "metrics.sim_decode_tokens_per_s",
    "prefill_tokens_per_s": "metrics.sim_prefill_tokens_per_s",
    "gpu_neuron_load_share": "metrics.sim_gpu_neuron_load_share",
    # FFN-only share of activated neurons on the GPU (absent in runs older than the metric)
    "gpu_ffn_load_share": "metrics.sim_gpu_ffn_load_share",
    "gpu_compute_share": "metrics.sim_gpu_compute_share",
}
PREFIX = {POWERINFER: "powerinfer", LLAMACPP: "llamacpp"}
COLORS = {LLAMACPP: "#9e9e9e", POWERINFER: "#1f77b4"}
CSV_COLUMNS = KEYS + [
    "batch_size",
    "llamacpp_tokens_per_s", "powerinfer_tokens_per_s", "speedup",
    "llamacpp_decode_tokens_per_s", "powerinfer_decode_tokens_per_s", "decode_speedup",
    "llamacpp_prefill_tokens_per_s", "powerinfer_prefill_tokens_per_s",
    "llamacpp_gpu_neuron_load_share", "powerinfer_gpu_neuron_load_share",
    "llamacpp_gpu_ffn_load_share", "powerinfer_gpu_ffn_load_share",
    "llamacpp_gpu_compute_share", "powerinfer_gpu_compute_share",
    "llamacpp_fits", "powerinfer_fits",
]


def tidy_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per simulated run: keys, system and the metrics above (latest re-run)."""
    if runs.empty:
        return pd.DataFrame(columns=KEYS + ["batch_size", "system", "fits", *METRICS])
    simulator = column(runs, "params.simulator.name")
    runs = runs[simulator == "cost_model"]
    frame = pd.DataFrame(simulated_columns(runs)).drop(columns=["solver", "mode"])
    for name, col in METRICS.items():
        frame[name] = pd.to_numeric(column(runs, col, np.nan))
    return latest(frame, KEYS + ["batch_size", "system"]).drop(columns="start_time")


def e2e_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Both systems side by side per KEYS (+ batch size), with the speedups."""
    if tidy.empty:
        return pd.DataFrame(columns=CSV_COLUMNS)
    wide = None
    for system, prefix in PREFIX.items():
        part = tidy[tidy.system == system].drop(columns="system")
        part = part.rename(columns={c: f"{prefix}_{c}" for c in [*METRICS, "fits"]})
        wide = part if wide is None else wide.merge(part, on=KEYS + ["batch_size"],
                                                    how="outer")
    assert wide is not None
    for prefix in PREFIX.values():
        fits = f"{prefix}_fits"
        wide[fits] = wide[fits].astype("boolean").fillna(False).astype(bool) \
            if fits in wide.columns else False
    wide["speedup"] = wide.powerinfer_tokens_per_s / wide.llamacpp_tokens_per_s
    wide["decode_speedup"] = (wide.powerinfer_decode_tokens_per_s
                              / wide.llamacpp_decode_tokens_per_s)
    for col in CSV_COLUMNS:
        if col not in wide.columns:
            wide[col] = np.nan
    order = {"fp16": 0, "int4": 1}
    wide = wide.assign(_d=wide.weight_dtype.map(order)).sort_values(
        ["hardware", "_d", "model", "prompt_tokens", "new_tokens"]).drop(columns="_d")
    return wide[CSV_COLUMNS].reset_index(drop=True)


def e2e_from_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The e2e table of a frame of runs as `mlflow.search_runs` returns them (`params.*`,
    `metrics.*`, `start_time` columns), wherever they come from."""
    return e2e_table(tidy_runs(runs))


def e2e_runs(experiment: str, tracking_uri: str | None = None, *, how_to_run: str = ""
             ) -> pd.DataFrame:
    """The e2e table of MLflow experiment `experiment`; LookupError (saying `how_to_run`)
    when it has no finished simulated run."""
    tidy = tidy_runs(search_runs(experiment, tracking_uri))
    if tidy.empty:
        hint = f"; run: {how_to_run}" if how_to_run else ""
        raise LookupError(f"no finished simulated runs in MLflow experiment {experiment!r}"
                          f"{hint}")
    return e2e_table(tidy)


def speed_bars(ax, rows: pd.DataFrame, title: str) -> None:
    """Simulated end-to-end tokens/s of both systems per (model, output length), log scale,
    the speedup above each pair ("does not fit" where neither system fits)."""
    rows = rows.reset_index(drop=True)
    if rows.empty:
        ax.set_visible(False)
        return
    x = np.arange(len(rows))
    width = 0.38
    for offset, system in ((-width / 2, LLAMACPP), (width / 2, POWERINFER)):
        values = rows[f"{PREFIX[system]}_tokens_per_s"].to_numpy(dtype=float)
        ax.bar(x + offset, np.nan_to_num(values, nan=0.0), width,
               label=f"{system} (simulated)", color=COLORS[system])
    for i, row in rows.iterrows():
        top = np.nanmax([row.llamacpp_tokens_per_s, row.powerinfer_tokens_per_s, 0.0])
        if np.isfinite(row.speedup):
            ax.text(i, top * 1.08, f"{row.speedup:.1f}x", ha="center", va="bottom", fontsize=7)
        elif not (row.powerinfer_fits or row.llamacpp_fits):
            ax.text(i, 0.03, "does not fit", ha="center", va="bottom", fontsize=7,
                    rotation=90, transform=ax.get_xaxis_transform())
    ax.set_xticks(x, [f"{m}\nout={n}" for m, n in zip(rows.model, rows.new_tokens,
                                                         strict=True)],
                  fontsize=6, rotation=90)
    ax.set_xlim(-0.8, max(len(rows), 2) - 0.2)  # one pair: no page-wide bars
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 2.5)  # room for the speedup labels
    ax.set_ylabel("simulated end-to-end tokens/s")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(axis="y", alpha=0.3, which="both")


def write_figure(name: str, table: pd.DataFrame, plot: Callable[[pd.DataFrame, Path], Path],
                 out_dir: str | Path | None = None) -> FigureOutput:
    """<out_dir>/<name>.csv (the table) and <name>.png (`plot(table, path)`)."""
    out = Path(out_dir) if out_dir is not None else paper_results_dir()
    out.mkdir(parents=True, exist_ok=True)
    csv = write_stamped_csv(table, out / f"{name}.csv")
    return FigureOutput(name, csv, plot(table, out / f"{name}.png"), table)


# the hardware profiles of the paper's PCs, as every panel title names them
PROFILES = {"pc_high": "RTX 4090 + i9-13900K profile", "pc_low": "RTX 2080 Ti + i7-12700K profile"}


def simulated_on(hardware: str) -> str:
    return f"SIMULATED on {hardware} ({PROFILES.get(hardware, 'hardware profile')})"


def save_png(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_speed(table: pd.DataFrame, path: Path, by: str, caption: str) -> Path:
    """One speed panel per value of `by` (prompt_tokens or hardware)."""
    from powerbench.figures.simulated import pyplot

    plt = pyplot()
    panels = sorted(table[by].dropna().unique())
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(max(7.5, 6.5 * n), 5.6), squeeze=False)
    for ax, value in zip(axes[0], panels, strict=False):
        rows = table[table[by] == value]
        hardware = ", ".join(sorted(rows.hardware.unique()))
        prompts = ", ".join(str(int(p)) for p in sorted(rows.prompt_tokens.unique()))
        dtypes = ", ".join(sorted(rows.weight_dtype.unique()))
        speed_bars(ax, rows, f"{simulated_on(hardware)}\ninput {prompts} tokens, {dtypes}")
    fig.suptitle(f"{caption}: PowerInfer (ILP placement + sparse FFN)\nvs llama.cpp (layer "
                 "offload + dense), cost model, batch 1", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return save_png(fig, path)


def speed_figure(name: str, caption: str, by: str, tracking_uri: str | None,
                 out_dir: str | Path | None) -> FigureOutput:
    """The e2e table of experiment `name` drawn as speed panels by `by`."""
    table = e2e_runs(name, tracking_uri, how_to_run=f"powerbench reproduce {name}")
    return write_figure(name, table, lambda t, p: plot_speed(t, p, by, caption), out_dir)
