"""PowerInfer-2's DRAM at llama.cpp's decode speed for a model that fits (Bamboo-7B,
OnePlus 12 profile; SIMULATED). Sweep: conf/experiment/pi2_memory.yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.phone import NOTE, PI2, phone_runs
from powerbench.figures.runs import FigureOutput
from powerbench.figures.simulated import pyplot, save_figure
from powerbench.reproduce.target import PI2_PAPER, Published, Target


def memory_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per (hardware, model): llama.cpp with the whole model in DRAM (its speed and DRAM),
    the least DRAM at which PowerInfer-2 decodes at least as fast, and their ratio."""
    rows = []
    for (hw, model), part in tidy[tidy.fits].groupby(["hardware", "model"]):
        llama = part[(part.system == "llama.cpp") & (part.pi2_ffn_in_flash == 0)]
        if llama.empty:
            continue
        ref = llama.sort_values("pi2_dram_used_gb").iloc[0]
        pi2 = part[(part.system == PI2)
                   & (part.sim_decode_tokens_per_s >= ref.sim_decode_tokens_per_s)]
        used = float(pi2.pi2_dram_used_gb.min()) if not pi2.empty else np.nan
        rows.append({"hardware": hw, "model": model,
                     "llamacpp_tokens_per_s": ref.sim_decode_tokens_per_s,
                     "llamacpp_dram_gb": ref.pi2_dram_used_gb, "pi2_dram_gb": used,
                     "memory_ratio": used / ref.pi2_dram_used_gb})
    return pd.DataFrame(rows)


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
               experiment: str = "pi2_memory") -> FigureOutput:
    tidy = phone_runs(experiment, tracking_uri)
    table = memory_table(tidy)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for system, part in tidy[tidy.fits].groupby("system"):
        part = part.sort_values("pi2_dram_used_gb")
        ax.plot(part.pi2_dram_used_gb, part.sim_decode_tokens_per_s, "o-", label=system)
    ax.set_xlabel("DRAM used (GB)")
    ax.set_ylabel("decode tokens/s")
    ax.legend(fontsize=7)
    ax.set_title(f"speed vs memory for a model that fits, {NOTE}", fontsize=8)
    fig.tight_layout()
    return save_figure("pi2_memory", table, fig, out_dir)


def memory_ratio(table: pd.DataFrame) -> float:
    return float(table.memory_ratio.iloc[0]) if len(table) else np.nan


TARGET = Target(
    name="pi2_memory", figure=figure, experiment="pi2_memory",
    published=(Published("PowerInfer-2 DRAM / llama.cpp DRAM at equal decode speed (model fits)",
                         0.6, memory_ratio,
                         PI2_PAPER.format("abstract / evaluation headline (~40% less memory)")),))
