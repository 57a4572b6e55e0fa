"""Validation figure: measured vs simulated tokens/s on this machine (`hardware=local`).

`powerbench validate` reports through the measurement harness: one MLflow run (experiment
`validation_local`, tag `powerbench.study=validation`) whose metrics are
`<engine>.<hardware variant>.<column>`, and the same rows as a CSV in its run directory.
`validation_table()` turns the newest such run back into those rows; `plot_validation()`
draws them (validate draws it into its run directory; `powerbench figure validation_local`
redraws it from MLflow into its run directory, `task.out_dir`, or with
`task.publish=true` results/validation/).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput, column, search_runs
from powerbench.paths import results_dir

NAME = "validation_local"
STUDY = "validation"
PHASES = {  # label -> (measured column, simulated column, error column)
    "decode": ("measured_decode_tokens_per_s", "sim_decode_tokens_per_s", "sim_error_pct"),
    "prefill": ("measured_prefill_tokens_per_s", "sim_prefill_tokens_per_s",
                "sim_prefill_error_pct"),
    "end_to_end": ("measured_end_to_end_tokens_per_s", "sim_end_to_end_tokens_per_s",
                   "sim_end_to_end_error_pct"),
}


def validation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of the newest `validate` report among `runs` (MLflow's frame): one per
    engine and hardware variant, its columns from the `<engine>.<variant>.<column>`
    metrics, `model` from the run's params."""
    if runs.empty:
        return pd.DataFrame()
    runs = runs[column(runs, "tags.powerbench.study") == STUDY]
    if runs.empty:
        return pd.DataFrame()
    newest = runs.loc[runs["start_time"].idxmax()]
    rows: dict[tuple[str, str], dict[str, object]] = {}
    for name, value in newest.items():
        if not str(name).startswith("metrics.") or pd.isna(value):
            continue
        parts = str(name).removeprefix("metrics.").split(".", 2)
        if len(parts) == 3:
            engine, variant, col = parts
            row = rows.setdefault((engine, variant), {"engine": engine,
                                                      "hardware_variant": variant})
            row[col] = float(value)
    frame = pd.DataFrame(list(rows.values()))
    if frame.empty:
        return frame
    frame.insert(2, "model", newest.get("params.model"))
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
    if "weights" in table and (table.weights == "synthetic").any():
        model += ", SYNTHETIC weights: speed only"
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
        raise LookupError(f"no validate report in MLflow experiment {NAME!r}; run: "
                          "powerbench validate")
    out = Path(out_dir) if out_dir is not None else results_dir() / STUDY
    csv = out / f"{NAME}.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False, float_format="%.6g")
    return FigureOutput(NAME, csv, plot_validation(table, out / f"{NAME}.png"), table)
