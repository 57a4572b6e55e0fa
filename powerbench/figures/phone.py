"""What the PowerInfer-2 phone targets share (SIMULATED runs, simulator=phone, not
measured): `phone_runs()` one row per latest run, `decode_table()` the systems side by
side with PowerInfer-2's speedups, `bars()` a decode bar chart written as <name>.csv/.png.
The targets themselves: powerbench.reproduce.targets.pi2_*.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput, column, find_simulated_runs, latest
from powerbench.figures.simulated import pyplot, save_figure

SYSTEMS = {"powerinfer2": "PowerInfer-2", "llmflash": "LLM-in-a-Flash", "mmap": "llama.cpp"}
NPU_DECODE = "QNN"  # any strategy with simulator.decode_unit=npu (experiment/system=qnn)
PI2, BASELINES = "PowerInfer-2", ("LLM-in-a-Flash", "llama.cpp", NPU_DECODE)
KEYS = ["hardware", "model", "system", "dram_budget_gb", "ffn_offload", "prefill_unit"]
NOTE = "SIMULATED (simulator=phone on a phone profile, not measured)"


def phone_runs(experiment: str, tracking_uri: str | None) -> pd.DataFrame:
    """One row per latest simulated phone run of `experiment`; LookupError when none."""
    runs = find_simulated_runs(experiment, tracking_uri, simulator="phone")
    budget = pd.to_numeric(column(runs, "params.solver.dram_budget_gb", np.nan),
                           errors="coerce")
    frame = pd.DataFrame({
        "hardware": column(runs, "params.hardware.name"),
        "model": column(runs, "params.model.name"),
        "system": column(runs, "params.solver.strategy").map(SYSTEMS).where(
            column(runs, "params.simulator.decode_unit", "cpu") != "npu", NPU_DECODE),
        "dram_budget_gb": budget.fillna(-1.0),
        # solver.ffn_offload_fraction (share of the FFN bytes in flash); -1: not set
        "ffn_offload": pd.to_numeric(column(runs, "params.solver.ffn_offload_fraction",
                                            np.nan), errors="coerce").fillna(-1.0),
        "prefill_unit": column(runs, "params.simulator.prefill_unit"),
        "fits": pd.to_numeric(column(runs, "metrics.sim_feasible", 1.0)).fillna(1.0) > 0,
        "start_time": runs["start_time"],
    })
    for name in ("sim_decode_tokens_per_s", "sim_prefill_tokens_per_s", "pi2_dram_used_gb",
                 "pi2_resident_ffn_share", "sim_flash_hit_rate", "sim_flash_ms_per_token",
                 "pi2_ffn_in_flash"):
        frame[name] = pd.to_numeric(column(runs, f"metrics.{name}", np.nan))
    return latest(frame, KEYS).drop(columns="start_time")


def decode_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per (hardware, model, budget): each system's decode tokens/s and PI2's speedups."""
    keys = ["hardware", "model", "dram_budget_gb", "ffn_offload"]
    wide = tidy.pivot_table(index=keys, columns="system", values="sim_decode_tokens_per_s",
                            aggfunc="last").reset_index()
    wide.columns.name = None
    for base in BASELINES:
        if PI2 in wide and base in wide:
            wide[f"speedup_vs_{base}"] = wide[PI2] / wide[base]
    return wide.sort_values(keys).reset_index(drop=True)


def bars(table: pd.DataFrame, label: str, title: str, out_dir, name: str) -> FigureOutput:
    plt = pyplot()
    systems = [s for s in (PI2, *BASELINES) if s in table]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(table)), 4.5))
    x = np.arange(len(table))
    width = 0.8 / max(len(systems), 1)
    for i, system in enumerate(systems):
        ax.bar(x + (i - (len(systems) - 1) / 2) * width, table[system].fillna(0), width,
               label=system)
    ax.set_xticks(x, table[label], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("decode tokens/s")
    ax.legend(fontsize=7)
    ax.set_title(f"{title}, {NOTE}", fontsize=8)
    fig.tight_layout()
    return save_figure(name, table, fig, out_dir)
