"""Fig. 18: PowerInfer and llama.cpp on PC-High (RTX 4090) vs vLLM on one A100 80 GB,
OPT-30B and Falcon(ReLU)-40B, FP16, inputs 1 and 64 (SIMULATED).

Systems (conf/experiment/system): powerinfer_pc_high, llamacpp_pc_high, vllm (the whole
model in the A100's memory, dense, with simulator=vllm: vLLM's own host time per layer).
Sweep: conf/experiment/fig18_a100.yaml.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput
from powerbench.figures.simulated import (
    SIMULATED_NOTE,
    pyplot,
    save_figure,
    side_by_side,
    simulated_frame,
    simulated_runs,
)
from powerbench.reproduce.target import POWERINFER_PAPER, Published, Target

KEYS = ["model", "weight_dtype", "prompt_tokens", "new_tokens", "batch_size"]
METRICS = ("tokens_per_s", "decode_tokens_per_s", "fits")
# prefix -> (hardware, solver, compute mode, label)
SYSTEMS = {"powerinfer": ("pc_high", "ilp", "sparse", "PowerInfer, PC-High (4090)", "#1f77b4"),
           "llamacpp": ("pc_high", "layer_offload", "dense", "llama.cpp, PC-High (4090)",
                        "#9e9e9e"),
           "a100": ("a100", "all_gpu", "dense", "vLLM, A100 80 GB", "#d62728")}


def fig18_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dtype, prompt, output, batch): each system's tokens/s; ratio = PowerInfer
    on PC-High / vLLM on the A100, llamacpp_ratio the same for llama.cpp."""
    parts = [tidy[(tidy.hardware == hw) & (tidy.solver == solver) & (tidy["mode"] == mode)]
             .assign(system=prefix) for prefix, (hw, solver, mode, _, _) in SYSTEMS.items()]
    wide = side_by_side(pd.concat(parts), {p: p for p in SYSTEMS}, KEYS, METRICS)
    wide["ratio"] = wide.powerinfer_tokens_per_s / wide.a100_tokens_per_s
    wide["decode_ratio"] = wide.powerinfer_decode_tokens_per_s / wide.a100_decode_tokens_per_s
    wide["llamacpp_ratio"] = wide.llamacpp_tokens_per_s / wide.a100_tokens_per_s
    wide.insert(0, "hardware", "+".join(dict.fromkeys(hw for hw, *_ in SYSTEMS.values())))
    return wide.sort_values(["model", "weight_dtype", "prompt_tokens"]).reset_index(drop=True)


def table_from_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return fig18_table(simulated_frame(runs))


def ratio(table: pd.DataFrame, model: str = "opt_30b", prompt_tokens: int = 1) -> float:
    """PowerInfer / A100 end-to-end tokens/s for `model` at input length `prompt_tokens`."""
    rows = table[(table.model == model) & (table.prompt_tokens == prompt_tokens)
                 & (table.weight_dtype == "fp16")]
    if rows.empty:
        raise LookupError(f"fig18 has no fp16 {model} row with a {prompt_tokens}-token prompt")
    return float(rows.ratio.iloc[0])


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
           experiment: str = "fig18_a100") -> FigureOutput:
    table = fig18_table(simulated_runs(experiment, tracking_uri))
    if table.empty:
        raise LookupError(f"MLflow experiment {experiment!r} has no PC-High or A100 runs; "
                          "run: powerbench reproduce fig18")
    plt = pyplot()
    prompts = sorted(int(p) for p in table.prompt_tokens.unique())
    fig, axes = plt.subplots(1, len(prompts), figsize=(6 * len(prompts), 4.5), squeeze=False)
    for ax, prompt in zip(axes[0], prompts, strict=True):
        rows = table[table.prompt_tokens == prompt].reset_index(drop=True)
        x = np.arange(len(rows))
        for k, (prefix, (_, _, _, label, color)) in enumerate(SYSTEMS.items()):
            ax.bar(x + (k - 1) * 0.27, np.nan_to_num(rows[f"{prefix}_tokens_per_s"]
                                                     .to_numpy(float)), 0.27, label=label,
                   color=color)
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
    return save_figure("fig18", table, fig, out_dir)


TARGET = Target(
    name="fig18", figure=figure, experiment="fig18_a100", table=table_from_runs,
    published=(Published(
        "OPT-30B FP16: PowerInfer (PC-High) / A100 tokens/s, input 1", 0.82,
        ratio, POWERINFER_PAPER.format("Fig. 18 text (comparison with A100)"),
        calibration=True, tolerance=0.2),))
