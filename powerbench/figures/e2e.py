"""End-to-end generation speed, PowerInfer vs llama.cpp, SIMULATED (paper figures 10-14).

One function per figure: `pc_high_e2e()` and `pc_low_e2e()` read the runs of
`powerbench --multirun experiment=<name>` from MLflow and write results/<name>.csv and
results/<name>.png: simulated end-to-end tokens/s per model, weight dtype and output length
for both systems, the speedup, and each system's GPU/CPU neuron-load split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput, column, latest, search_runs, system_label
from powerbench.paths import results_dir

POWERINFER, LLAMACPP = "PowerInfer", "llama.cpp"
KEYS = ["hardware", "model", "weight_dtype", "new_tokens"]
CSV_COLUMNS = KEYS + [
    "prompt_tokens", "batch_size",
    "llamacpp_tokens_per_s", "powerinfer_tokens_per_s", "speedup",
    "llamacpp_decode_tokens_per_s", "powerinfer_decode_tokens_per_s", "decode_speedup",
    "llamacpp_prefill_tokens_per_s", "powerinfer_prefill_tokens_per_s",
    "llamacpp_gpu_neuron_load_share", "powerinfer_gpu_neuron_load_share",
    "llamacpp_gpu_compute_share", "powerinfer_gpu_compute_share",
    "llamacpp_fits", "powerinfer_fits",
]
METRICS = {
    "tokens_per_s": "metrics.sim_end_to_end_tokens_per_s",
    "decode_tokens_per_s": "metrics.sim_decode_tokens_per_s",
    "prefill_tokens_per_s": "metrics.sim_prefill_tokens_per_s",
    "gpu_neuron_load_share": "metrics.sim_gpu_neuron_load_share",
    "gpu_compute_share": "metrics.sim_gpu_compute_share",
}
PREFIX = {POWERINFER: "powerinfer", LLAMACPP: "llamacpp"}


def tidy_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per simulated run: keys, system and the metrics above (latest re-run)."""
    if runs.empty:
        return pd.DataFrame(columns=KEYS + ["system", "fits", *METRICS])
    simulator = column(runs, "params.simulator.name")
    runs = runs[simulator == "cost_model"]
    frame = pd.DataFrame({
        "hardware": column(runs, "params.hardware.name"),
        "model": column(runs, "params.model.name"),
        "weight_dtype": column(runs, "params.model.weight_dtype"),
        "new_tokens": pd.to_numeric(column(runs, "params.bench.new_tokens")),
        "prompt_tokens": pd.to_numeric(column(runs, "params.bench.prompt_tokens")),
        "batch_size": pd.to_numeric(column(runs, "params.bench.batch_size")),
        "system": [system_label(s, m) for s, m in zip(column(runs, "params.solver.name"),
                                                       column(runs, "params.simulator.mode"),
                                                       strict=True)],
        "fits": pd.to_numeric(column(runs, "metrics.sim_feasible", 1.0)).fillna(1.0) > 0,
        "start_time": runs["start_time"],
    })
    for name, col in METRICS.items():
        frame[name] = pd.to_numeric(column(runs, col, np.nan))
    return latest(frame, KEYS + ["system"]).drop(columns="start_time")


def e2e_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Both systems side by side per (hardware, model, dtype, output length) + speedups."""
    if tidy.empty:
        return pd.DataFrame(columns=CSV_COLUMNS)
    wide = None
    for system, prefix in PREFIX.items():
        part = tidy[tidy.system == system].drop(columns="system")
        part = part.rename(columns={c: f"{prefix}_{c}" for c in [*METRICS, "fits"]})
        wide = part if wide is None else wide.merge(
            part, on=KEYS + ["prompt_tokens", "batch_size"], how="outer")
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
        ["hardware", "_d", "model", "new_tokens"]).drop(columns="_d")
    return wide[CSV_COLUMNS].reset_index(drop=True)


def _bars(ax, table: pd.DataFrame, dtype: str) -> None:
    rows = table[table.weight_dtype == dtype].reset_index(drop=True)
    if rows.empty:
        ax.set_visible(False)
        return
    x = np.arange(len(rows))
    width = 0.38
    for offset, system, color in ((-width / 2, LLAMACPP, "#9e9e9e"),
                                  (width / 2, POWERINFER, "#1f77b4")):
        values = rows[f"{PREFIX[system]}_tokens_per_s"].to_numpy(dtype=float)
        ax.bar(x + offset, np.nan_to_num(values, nan=0.0), width, label=f"{system} (simulated)",
               color=color)
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
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 2.5)  # room for the speedup labels
    ax.set_ylabel("simulated end-to-end tokens/s")
    ax.set_title(f"{dtype}: generated tokens / (prefill + decode)", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(axis="y", alpha=0.3, which="both")


def _load_split(ax, table: pd.DataFrame, dtype: str) -> None:
    """GPU vs CPU share of active FFN neurons, per model and system (output length 128 or
    the longest simulated: the split depends on the placement, hardly on the length)."""
    rows = table[table.weight_dtype == dtype]
    if rows.empty:
        ax.set_visible(False)
        return
    pick = 128 if (rows.new_tokens == 128).any() else rows.new_tokens.max()
    rows = rows[rows.new_tokens == pick].reset_index(drop=True)
    x = np.arange(len(rows))
    width = 0.38
    for offset, system, color in ((-width / 2, LLAMACPP, "#9e9e9e"),
                                  (width / 2, POWERINFER, "#1f77b4")):
        gpu = np.nan_to_num(rows[f"{PREFIX[system]}_gpu_neuron_load_share"].to_numpy(float))
        ax.bar(x + offset, gpu, width, color=color, label=f"{system}: GPU")
        ax.bar(x + offset, np.where(gpu > 0, 1 - gpu, 0), width, bottom=gpu, color=color,
               alpha=0.3, hatch="//", label=f"{system}: CPU")
    for i, row in rows.iterrows():
        if not (row.powerinfer_fits or row.llamacpp_fits):
            ax.text(i, 0.5, "does not fit", ha="center", va="center", fontsize=7, rotation=90)
    ax.set_xticks(x, list(rows.model), fontsize=7, rotation=30)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of active FFN neurons (simulated)")
    ax.set_title(f"{dtype}: neuron-load split GPU (solid) / CPU (hatched), output {pick}",
                 fontsize=9)
    ax.legend(fontsize=6, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.22))


def plot_e2e(table: pd.DataFrame, hardware: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = [d for d in ("fp16", "int4") if (table.weight_dtype == d).any()] or ["fp16"]
    fig, axes = plt.subplots(2, len(dtypes), figsize=(6.5 * len(dtypes), 9), squeeze=False)
    for j, dtype in enumerate(dtypes):
        _bars(axes[0, j], table, dtype)
        _load_split(axes[1, j], table, dtype)
    prompt = ", ".join(str(int(p)) for p in sorted(table.prompt_tokens.dropna().unique()))
    fig.suptitle(f"SIMULATED on hardware profile '{hardware}' (cost model, not measured): "
                 f"PowerInfer (ILP + sparse) vs llama.cpp (layer offload + dense), "
                 f"prompt {prompt} tokens, batch 1", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def e2e_figure(name: str, hardware: str, tracking_uri: str | None = None,
               out_dir: str | Path | None = None, experiment: str | None = None) -> FigureOutput:
    """Runs of MLflow experiment `experiment` (default: `name`) on `hardware` ->
    <out_dir>/<name>.csv and .png (out_dir default: results/)."""
    runs = search_runs(experiment or name, tracking_uri)
    tidy = tidy_runs(runs)
    tidy = tidy[tidy.hardware == hardware]
    if tidy.empty:
        raise LookupError(f"no finished simulated runs on {hardware!r} in MLflow experiment "
                          f"{experiment or name!r}; run: powerbench --multirun experiment={name}")
    table = e2e_table(tidy)
    out = Path(out_dir) if out_dir is not None else results_dir()
    csv = out / f"{name}.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False, float_format="%.6g")
    png = plot_e2e(table, hardware, out / f"{name}.png")
    return FigureOutput(name, csv, png, table)


def pc_high_e2e(tracking_uri: str | None = None, out_dir: str | Path | None = None
                ) -> FigureOutput:
    """PC-High (RTX 4090 + i9-13900K): OPT-30B/66B/175B, Falcon(ReLU)-40B, LLaMA(ReGLU)-70B."""
    return e2e_figure("pc_high_e2e", "pc_high", tracking_uri, out_dir)


def pc_low_e2e(tracking_uri: str | None = None, out_dir: str | Path | None = None
               ) -> FigureOutput:
    """PC-Low (RTX 2080 Ti + i7-12700K): OPT-13B/30B, LLaMA(ReGLU)-13B, Bamboo-7B."""
    return e2e_figure("pc_low_e2e", "pc_low", tracking_uri, out_dir)
