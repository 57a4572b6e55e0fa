"""Paper figures 14, 15 and 18 from SIMULATED runs (cost model, not measured).

    fig14(): tokens/s vs batch size, PowerInfer vs llama.cpp     (experiment fig14_batch)
    fig15(): the ablation llama.cpp -> +PO -> +Engine -> +Policy   (experiment fig15_ablation)
    fig18(): PowerInfer on PC-High vs the whole model on an A100 (experiment fig18_a100)

Each reads the finished runs of its experiment from MLflow and writes <out_dir>/<name>.csv
and .png (out_dir default: results/). The measured and table targets (fig16, table6,
table7) are in `powerbench.figures.paper_tables`.
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
    simulated_columns,
)
from powerbench.paths import results_dir

POWERINFER, LLAMACPP = "PowerInfer", "llama.cpp"
SIM_KEYS = ["hardware", "model", "weight_dtype", "prompt_tokens", "new_tokens", "batch_size"]
SIM_METRICS = {
    "tokens_per_s": "metrics.sim_end_to_end_tokens_per_s",
    "decode_tokens_per_s": "metrics.sim_decode_tokens_per_s",
    "prefill_tokens_per_s": "metrics.sim_prefill_tokens_per_s",
    "gpu_neuron_load_share": "metrics.sim_gpu_neuron_load_share",
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


def write_figure(name: str, table: pd.DataFrame, fig, out_dir: str | Path | None
                 ) -> FigureOutput:
    """<out_dir>/<name>.csv from `table` and .png from the matplotlib figure `fig`."""
    import matplotlib.pyplot as plt

    out = Path(out_dir) if out_dir is not None else results_dir()
    out.mkdir(parents=True, exist_ok=True)
    csv, png = out / f"{name}.csv", out / f"{name}.png"
    table.to_csv(csv, index=False, float_format="%.6g")
    fig.savefig(png, dpi=130)
    plt.close(fig)
    return FigureOutput(name, csv, png, table)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---- figure 14: batch size -----------------------------------------------------------------

FIG14_PREFIX = {POWERINFER: "powerinfer", LLAMACPP: "llamacpp"}


def fig14_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per (hardware, model, dtype, prompt, output, batch): both systems' tokens/s + speedup."""
    wide = side_by_side(tidy, FIG14_PREFIX, SIM_KEYS)
    wide["speedup"] = wide.powerinfer_tokens_per_s / wide.llamacpp_tokens_per_s
    wide["decode_speedup"] = wide.powerinfer_decode_tokens_per_s / wide.llamacpp_decode_tokens_per_s
    return wide.sort_values(["hardware", "model", "weight_dtype", "batch_size"]) \
        .reset_index(drop=True)


def fig14(tracking_uri: str | None = None, out_dir: str | Path | None = None,
          experiment: str = "fig14_batch") -> FigureOutput:
    """Paper figure 14: end-to-end tokens/s (all sequences of the batch) vs batch size."""
    table = fig14_table(simulated_runs(experiment, tracking_uri))
    plt = _pyplot()
    groups = list(table.groupby(["hardware", "model", "weight_dtype"], sort=False))
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
    for ax, ((hardware, model, dtype), rows) in zip(axes[0], groups, strict=True):
        for system, color in ((LLAMACPP, "#9e9e9e"), (POWERINFER, "#1f77b4")):
            ax.plot(rows.batch_size, rows[f"{FIG14_PREFIX[system]}_tokens_per_s"], "o-",
                    color=color, label=f"{system} (simulated)")
        for _, row in rows.iterrows():
            if np.isfinite(row.speedup):
                ax.annotate(f"{row.speedup:.1f}x", (row.batch_size, row.powerinfer_tokens_per_s),
                            textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(rows.batch_size, [str(int(b)) for b in rows.batch_size])
        ax.set_xlabel("batch size")
        ax.set_ylabel("end-to-end tokens/s (whole batch)")
        ax.set_title(f"{model} {dtype} on {hardware}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    prompt, new = int(table.prompt_tokens.iloc[0]), int(table.new_tokens.iloc[0])
    fig.suptitle(f"Fig. 14 batch sizes, {SIMULATED_NOTE}; prompt {prompt}, output {new}; "
                 "labels: PowerInfer speedup", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return write_figure("fig14", table, fig, out_dir)


# ---- figure 15: ablation -------------------------------------------------------------------

# (solver, mode) of each ablation step, in order; "+Policy" is the full PowerInfer
ABLATION = (("llama.cpp", "llamacpp", ("layer_offload", "dense")),
            ("+PO", "po", ("greedy", "dense")),
            ("+Engine", "engine", ("greedy", "sparse")),
            ("+Policy", "policy", ("ilp", "sparse")))
ABLATION_NOTE = ("+PO = greedy hot/cold neuron placement with dense compute of every neuron "
                 "each device holds (the paper's +PO already skips neurons through llama.cpp's "
                 "operators; the cost model has no such half-sparse operator, so ours is a "
                 "lower bound); +Engine = same placement, sparse predictor-selected compute; "
                 "+Policy = ILP placement + sparse (full PowerInfer)")


def fig15_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per model: each ablation step's tokens/s and its speedup over llama.cpp."""
    tidy = tidy.assign(step=[next((p for _, p, sm in ABLATION if sm == (s, m)), None)
                             for s, m in zip(tidy.solver, tidy["mode"], strict=True)])
    tidy = tidy[tidy.step.notna()].assign(system=lambda f: f.step)
    prefixes = {p: p for _, p, _ in ABLATION}
    wide = side_by_side(tidy, prefixes, SIM_KEYS)
    for _, p, _ in ABLATION[1:]:
        wide[f"{p}_speedup"] = wide[f"{p}_tokens_per_s"] / wide.llamacpp_tokens_per_s
    return wide.sort_values(["hardware", "weight_dtype", "model"]).reset_index(drop=True)


def fig15(tracking_uri: str | None = None, out_dir: str | Path | None = None,
          experiment: str = "fig15_ablation") -> FigureOutput:
    """Paper figure 15: tokens/s of each ablation step per model (speedup over llama.cpp)."""
    table = fig15_table(simulated_runs(experiment, tracking_uri))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 2.2 * len(table)), 5.5))
    x = np.arange(len(table))
    width = 0.8 / len(ABLATION)
    colors = ("#9e9e9e", "#ffbb78", "#98df8a", "#1f77b4")
    for i, ((label, p, _), color) in enumerate(zip(ABLATION, colors, strict=True)):
        values = table[f"{p}_tokens_per_s"].to_numpy(dtype=float)
        pos = x + (i - (len(ABLATION) - 1) / 2) * width
        ax.bar(pos, np.nan_to_num(values), width, label=label, color=color)
        speedups = (table[f"{p}_speedup"].to_numpy(dtype=float) if p != "llamacpp"
                    else np.full(len(table), np.nan))
        for xi, v, speed, ok in zip(pos, values, speedups, table[f"{p}_fits"], strict=True):
            text = f"{speed:.1f}x" if np.isfinite(speed) else ("n/a" if not ok else "")
            ax.text(xi, max(np.nan_to_num(v), 1e-3) * 1.05, text, ha="center", va="bottom",
                    fontsize=6, rotation=90)
    ax.set_xticks(x, [f"{m}\n{d}" for m, d in zip(table.model, table.weight_dtype, strict=True)],
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 3)
    ax.set_ylabel("end-to-end tokens/s")
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper right")
    hardware = ", ".join(sorted(table.hardware.dropna().unique()))
    fig.suptitle(f"Fig. 15 ablation on {hardware}, {SIMULATED_NOTE}\nlabels: speedup over "
                 "llama.cpp", fontsize=9)
    fig.text(0.01, 0.01, ABLATION_NOTE, fontsize=6, wrap=True)
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.22, top=0.88)
    return write_figure("fig15", table, fig, out_dir)


# ---- figure 18: PC-High vs A100 ------------------------------------------------------------

FIG18_KEYS = ["model", "weight_dtype", "prompt_tokens", "new_tokens", "batch_size"]
FIG18_METRICS = ("tokens_per_s", "decode_tokens_per_s", "fits")


def fig18_table(tidy: pd.DataFrame, pc: str = "pc_high", server: str = "a100") -> pd.DataFrame:
    """Per (model, dtype, prompt, output, batch): PowerInfer on `pc` (ilp + sparse) and the
    whole model on `server` (all_gpu + dense); ratio = PowerInfer / A100 tokens/s."""
    pi = tidy[(tidy.hardware == pc) & (tidy.solver == "ilp") & (tidy["mode"] == "sparse")]
    ref = tidy[(tidy.hardware == server) & (tidy.solver == "all_gpu") & (tidy["mode"] == "dense")]
    both = pd.concat([pi.assign(system="powerinfer"), ref.assign(system="a100")])
    wide = side_by_side(both, {"powerinfer": "powerinfer", "a100": "a100"}, FIG18_KEYS,
                        FIG18_METRICS)
    wide["ratio"] = wide.powerinfer_tokens_per_s / wide.a100_tokens_per_s
    wide["decode_ratio"] = wide.powerinfer_decode_tokens_per_s / wide.a100_decode_tokens_per_s
    return wide.sort_values(["model", "weight_dtype", "prompt_tokens"]).reset_index(drop=True)


def fig18_from_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """fig18_table of a frame of runs as `mlflow.search_runs` returns them."""
    return fig18_table(simulated_frame(runs))


def fig18_ratio(table: pd.DataFrame, model: str = "opt_30b", prompt_tokens: int = 64) -> float:
    """PowerInfer / A100 end-to-end tokens/s for `model` at input length `prompt_tokens`."""
    rows = table[(table.model == model) & (table.prompt_tokens == prompt_tokens)
                 & (table.weight_dtype == "fp16")]
    if rows.empty:
        raise LookupError(f"fig18 has no fp16 {model} row with a {prompt_tokens}-token prompt")
    return float(rows.ratio.iloc[0])


def fig18(tracking_uri: str | None = None, out_dir: str | Path | None = None,
          experiment: str = "fig18_a100") -> FigureOutput:
    """Paper figure 18: PowerInfer on PC-High (RTX 4090) vs an A100 holding the whole model."""
    table = fig18_table(simulated_runs(experiment, tracking_uri))
    if table.empty:
        raise LookupError(f"MLflow experiment {experiment!r} has no PowerInfer-on-pc_high or "
                          "all_gpu-on-a100 runs; run: powerbench --multirun "
                          f"experiment={experiment}")
    plt = _pyplot()
    prompts = sorted(int(p) for p in table.prompt_tokens.unique())
    fig, axes = plt.subplots(1, len(prompts), figsize=(5.5 * len(prompts), 4.5), squeeze=False)
    for ax, prompt in zip(axes[0], prompts, strict=True):
        rows = table[table.prompt_tokens == prompt].reset_index(drop=True)
        x = np.arange(len(rows))
        for off, prefix, label, color in ((-0.2, "powerinfer", "PowerInfer, PC-High (4090)",
                                           "#1f77b4"),
                                          (0.2, "a100", "A100 80 GB, all on GPU, dense",
                                           "#d62728")):
            ax.bar(x + off, np.nan_to_num(rows[f"{prefix}_tokens_per_s"].to_numpy(float)), 0.4,
                   label=label, color=color)
        for i, row in rows.iterrows():
            top = np.nanmax([row.powerinfer_tokens_per_s, row.a100_tokens_per_s, 0.0])
            text = f"{row.ratio:.2f}" if np.isfinite(row.ratio) else (
                "A100: does not fit" if not row.a100_fits else "n/a")
            ax.text(i, top * 1.03, text, ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, [f"{m}\n{d}" for m, d in zip(rows.model, rows.weight_dtype,
                                                       strict=True)], fontsize=8)
        ax.set_ylabel("end-to-end tokens/s")
        ax.set_title(f"input {prompt}, output {int(rows.new_tokens.iloc[0])}; "
                     "labels: PowerInfer / A100", fontsize=9)
        ax.set_ylim(top=ax.get_ylim()[1] * 1.15)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"Fig. 18 consumer GPU vs A100, {SIMULATED_NOTE}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return write_figure("fig18", table, fig, out_dir)
