"""PowerInfer's PC figures 10-13, SIMULATED by the cost model (not measured).

One function per figure, reading the runs of `powerbench reproduce figNN` (MLflow experiment
figNN, swept by conf/experiment/figNN.yaml) and writing <out_dir>/figNN.csv and .png:

- fig10 / fig11: FP16 end-to-end tokens/s on PC-High / PC-Low, bars per model and output
  length, one panel per prompt (input) length, the speedup over llama.cpp on top.
- fig12: the GPU/CPU split of the neuron load per model and system on PC-High.
- fig13: INT4 end-to-end tokens/s, one panel per PC.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.e2e import (
    COLORS,
    LLAMACPP,
    POWERINFER,
    PREFIX,
    e2e_runs,
    speed_bars,
    write_figure,
)
from powerbench.figures.runs import FigureOutput

# the hardware profiles of the paper's PCs, as every panel title names them
PROFILES = {"pc_high": "RTX 4090 + i9-13900K profile", "pc_low": "RTX 2080 Ti + i7-12700K profile"}


def simulated_on(hardware: str) -> str:
    return f"SIMULATED on {hardware} ({PROFILES.get(hardware, 'hardware profile')})"


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_speed(table: pd.DataFrame, path: Path, by: str, caption: str) -> Path:
    """One speed panel per value of `by` (prompt_tokens or hardware)."""
    plt = _pyplot()
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
    return _save(fig, path)


def _speed_figure(name: str, caption: str, by: str, tracking_uri: str | None,
                  out_dir: str | Path | None) -> FigureOutput:
    table = e2e_runs(name, tracking_uri, how_to_run=f"powerbench reproduce {name}")
    return write_figure(name, table, lambda t, p: plot_speed(t, p, by, caption), out_dir)


def fig10(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """PC-High FP16: OPT-30B/66B, Falcon(ReLU)-40B, LLaMA(ReGLU)-70B; inputs 64/128."""
    return _speed_figure("fig10", "Fig. 10, PC-High FP16", "prompt_tokens", tracking_uri,
                         out_dir)


def fig11(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """PC-Low FP16: Bamboo-7B, OPT-13B/30B, LLaMA(ReGLU)-13B; inputs 64/128."""
    return _speed_figure("fig11", "Fig. 11, PC-Low FP16", "prompt_tokens", tracking_uri,
                         out_dir)


def fig13(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """INT4 on PC-High and PC-Low, input 64."""
    return _speed_figure("fig13", "Fig. 13, INT4", "hardware", tracking_uri, out_dir)


def plot_load_split(table: pd.DataFrame, path: Path) -> Path:
    """Stacked GPU (solid) / CPU (hatched) share of the neuron load per model and system;
    the FFN-only activated-neuron GPU share as a marker where the runs logged it."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.2))
    rows = table.reset_index(drop=True)
    x = np.arange(len(rows))
    width = 0.38
    for offset, system in ((-width / 2, LLAMACPP), (width / 2, POWERINFER)):
        prefix, color = PREFIX[system], COLORS[system]
        gpu = rows[f"{prefix}_gpu_neuron_load_share"].to_numpy(dtype=float)
        shown = np.nan_to_num(gpu)
        ax.bar(x + offset, shown, width, color=color, label=f"{system}: GPU")
        ax.bar(x + offset, np.where(np.isfinite(gpu), 1 - shown, 0), width, bottom=shown,
               color=color, alpha=0.3, hatch="//", label=f"{system}: CPU")
        for xi, g in zip(x + offset, gpu, strict=True):
            if np.isfinite(g):
                ax.text(xi, g / 2, f"{100 * g:.0f}%", ha="center", va="center", fontsize=7,
                        color="white")
        ffn = rows[f"{prefix}_gpu_ffn_load_share"].to_numpy(dtype=float)
        if np.isfinite(ffn).any():
            ax.plot(x + offset, ffn, "D", color="black", markersize=5,
                    label="FFN only: share of activated FFN neurons on the GPU (each system)"
                    if system == POWERINFER else "_nolegend_")
    for i, row in rows.iterrows():
        if not (row.powerinfer_fits or row.llamacpp_fits):
            ax.text(i, 0.5, "does not fit", ha="center", va="center", fontsize=7, rotation=90)
    ax.set_xticks(x, [f"{m}\n{d}" for m, d in zip(rows.model, rows.weight_dtype, strict=True)],
                  fontsize=8)
    ax.set_xlim(-0.8, max(len(rows), 2) - 0.2)  # one model: no page-wide bars
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of the neuron load (simulated)")
    hardware = ", ".join(sorted(rows.hardware.unique()))
    shapes = ", ".join(f"input {int(p)} / output {int(n)}" for p, n in
                       rows[["prompt_tokens", "new_tokens"]].drop_duplicates().itertuples(
                           index=False))
    ax.set_title(f"Fig. 12, neuron-load split GPU (solid) / CPU (hatched)\n"
                 f"{simulated_on(hardware)}, {shapes}", fontsize=9)
    ax.legend(fontsize=7, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    return _save(fig, path)


def fig12(tracking_uri: str | None = None, out_dir: str | Path | None = None) -> FigureOutput:
    """PC-High: OPT-30B and OPT-66B in FP16, OPT-175B in INT4; input 64, output 128."""
    table = e2e_runs("fig12", tracking_uri, how_to_run="powerbench reproduce fig12")
    return write_figure("fig12", table, plot_load_split, out_dir)
