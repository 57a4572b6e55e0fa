"""Validation figure: measured vs simulated tokens/s on this machine (`hardware=local`).

`validation_local()` reads the runs of `powerbench.simulator.validate` (MLflow experiment
`validation_local`) and writes results/validation_local.csv and .png.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput, bench_lengths, column, latest, search_runs
from powerbench.paths import results_dir

NAME = "validation_local"
PHASES = {  # label -> (measured metric, simulated metric, error metric)
    "decode": ("decode_tokens_per_s", "sim_decode_tokens_per_s", "sim_error_pct"),
    "prefill": ("prefill_tokens_per_s", "sim_prefill_tokens_per_s", "sim_prefill_error_pct"),
    "end_to_end": ("end_to_end_tokens_per_s", "sim_end_to_end_tokens_per_s",
                   "sim_end_to_end_error_pct"),
}


def validation_table(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return pd.DataFrame()
    runs = runs[column(runs, "tags.validation") == "true"]
    batches = column(runs, "tags.validation_batch")
    if batches.notna().any():  # only the newest `powerbench validate` (older rows are stale)
        newest = batches[runs["start_time"] == runs.loc[batches.notna(), "start_time"].max()]
        runs = runs[batches == newest.iloc[0]]
    frame = pd.DataFrame({
        "engine": column(runs, "params.engine.name"),
        "hardware_variant": column(runs, "tags.hardware_variant"),
        "model": column(runs, "params.model.name"),
        **bench_lengths(runs),
        "start_time": runs["start_time"],
    })
    for phase, (meas, sim, err) in PHASES.items():
        frame[f"measured_{phase}_tokens_per_s"] = pd.to_numeric(column(runs, f"metrics.{meas}"))
        frame[f"sim_{phase}_tokens_per_s"] = pd.to_numeric(column(runs, f"metrics.{sim}"))
        frame[err] = pd.to_numeric(column(runs, f"metrics.{err}"))
    extra = {"sim_error_paired_pct": "sim_error_paired_pct",
             "sim_prefill_error_paired_pct": "sim_prefill_error_paired_pct",
             "best_decode_tokens_per_s": "measured_best_decode_tokens_per_s",
             "sim_error_best_pct": "sim_error_best_pct",
             "best_prefill_tokens_per_s": "measured_best_prefill_tokens_per_s",
             "sim_prefill_error_best_pct": "sim_prefill_error_best_pct",
             "hw_hw_cpu_bw_gb_s": "cpu_bw_gb_s", "hw_hw_launch_us": "op_us",
             "sim_cpu_sparse_call_us": "sparse_call_us",
             "hw_cpu_gflops": "cpu_gflops",
             "hw_cpu_attention_gflops": "cpu_attention_gflops", "ops_attention": "ops_attention",
             "ops_ffn": "ops_ffn", "ops_token": "ops_token",
             "host_load_avg_1m_before": "load_avg_before",
             "host_load_avg_1m_after": "load_avg_after"}
    for metric, name in extra.items():
        frame[name] = pd.to_numeric(column(runs, f"metrics.{metric}"))
    frame = latest(frame, ["engine", "hardware_variant"]).drop(columns="start_time")
    return frame.sort_values(["engine", "hardware_variant"]).reset_index(drop=True)


def plot_validation(table: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = ["decode", "prefill"]
    fig, axes = plt.subplots(1, len(phases), figsize=(11, 4.5), squeeze=False)
    engines = list(dict.fromkeys(table.engine))
    variants = list(dict.fromkeys(table.hardware_variant))
    for ax, phase in zip(axes[0], phases, strict=True):
        err = PHASES[phase][2]
        x = np.arange(len(engines))
        width = 0.8 / (2 + len(variants))
        first = [table[table.engine == e].iloc[0] for e in engines]
        ax.bar(x - 0.4 + width / 2, [r[f"measured_{phase}_tokens_per_s"] for r in first],
               width, label="measured (median repeat)", color="#2ca02c")
        ax.bar(x - 0.4 + 1.5 * width,
               [r.get(f"measured_best_{phase}_tokens_per_s", np.nan) for r in first], width,
               label="measured (fastest repeat)", color="#2ca02c", alpha=0.45, hatch="//")
        for k, variant in enumerate(variants):
            rows = [table[(table.engine == e) & (table.hardware_variant == variant)]
                    for e in engines]
            sim = [r[f"sim_{phase}_tokens_per_s"].iloc[0] if len(r) else np.nan for r in rows]
            errs = [r[err].iloc[0] if len(r) else np.nan for r in rows]
            pos = x - 0.4 + width * (k + 2.5)
            ax.bar(pos, sim, width, label=f"simulated ({variant} rates)",
                   color=["#1f77b4", "#ff7f0e", "#9467bd"][k % 3])
            for p, s, e in zip(pos, sim, errs, strict=True):
                if np.isfinite(s):
                    ax.text(p, s * 1.05, f"{e:+.0f}%", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, engines)
        ax.set_yscale("log")
        ax.set_ylim(top=ax.get_ylim()[1] * 3)
        ax.set_ylabel(f"{phase} tokens/s (log)")
        ax.set_title(f"{phase}: measured vs simulated (error in %)", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", ncols=2)
    model = ", ".join(sorted(set(table.model.dropna())))
    fig.suptitle(f"Cost model vs measurement on hardware profile 'local' ({model})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def validation_local(tracking_uri: str | None = None, out_dir: str | Path | None = None
                     ) -> FigureOutput:
    table = validation_table(search_runs(NAME, tracking_uri))
    if table.empty:
        raise LookupError(f"no validation runs in MLflow experiment {NAME!r}; run: "
                          "powerbench validate")
    out = Path(out_dir) if out_dir is not None else results_dir() / "calibration"
    csv = out / f"{NAME}.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False, float_format="%.6g")
    return FigureOutput(NAME, csv, plot_validation(table, out / f"{NAME}.png"), table)
