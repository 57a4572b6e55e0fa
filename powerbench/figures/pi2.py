"""PowerInfer-2 phone figures from SIMULATED runs (simulator=phone, not measured).

    pi2_decode():  decode tokens/s per model and phone, PowerInfer-2 vs the baselines
    pi2_budget():  decode tokens/s vs the DRAM budget (offload ratio)
    pi2_prefill(): prefill tokens/s with the NPU vs on the CPU
    pi2_memory():  PowerInfer-2's DRAM at llama.cpp's speed, for a model that fits

Each reads its experiment's finished runs from MLflow and writes <out_dir>/<name>.csv, .png.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.paper_more import _pyplot, write_figure
from powerbench.figures.runs import FigureOutput, column, find_simulated_runs, latest

SYSTEMS = {"powerinfer2": "PowerInfer-2", "llmflash": "LLM-in-a-Flash", "mmap": "llama.cpp"}
PI2, BASELINES = "PowerInfer-2", ("LLM-in-a-Flash", "llama.cpp")
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
        "system": column(runs, "params.solver.strategy").map(SYSTEMS),
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


def _bars(table: pd.DataFrame, label: str, title: str, out_dir, name: str) -> FigureOutput:
    plt = _pyplot()
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
    return write_figure(name, table, fig, out_dir)


def pi2_decode(tracking_uri: str | None = None, out_dir: str | Path | None = None,
               experiment: str = "pi2_decode") -> FigureOutput:
    table = decode_table(phone_runs(experiment, tracking_uri))
    table["label"] = table.model + "\n" + table.hardware + table.ffn_offload.map(
        lambda f: f"\n{f:.0%} FFN in flash" if f >= 0 else "")
    return _bars(table, "label", "PowerInfer-2 decode vs baselines", out_dir, "pi2_decode")


def pi2_budget(tracking_uri: str | None = None, out_dir: str | Path | None = None,
               experiment: str = "pi2_budget") -> FigureOutput:
    table = decode_table(phone_runs(experiment, tracking_uri))
    table["label"] = table.model + "\n" + table.dram_budget_gb.map(lambda b: f"{b:g} GB")
    return _bars(table, "label", "decode vs DRAM budget", out_dir, "pi2_budget")


def pi2_prefill(tracking_uri: str | None = None, out_dir: str | Path | None = None,
                experiment: str = "pi2_prefill") -> FigureOutput:
    tidy = phone_runs(experiment, tracking_uri)
    table = tidy.pivot_table(index=["hardware", "model"], columns="prefill_unit",
                             values="sim_prefill_tokens_per_s", aggfunc="last").reset_index()
    table.columns.name = None
    if {"npu", "cpu"} <= set(table.columns):
        table["npu_speedup"] = table.npu / table.cpu
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(len(table))
    for i, unit in enumerate(u for u in ("cpu", "npu") if u in table):
        ax.bar(x + (i - 0.5) * 0.4, table[unit], 0.4, label=f"prefill on {unit}")
    ax.set_xticks(x, table.model + "\n" + table.hardware, fontsize=7)
    ax.set_ylabel("prefill tokens/s")
    ax.legend(fontsize=7)
    ax.set_title(f"PowerInfer-2 prefill, NPU vs CPU, {NOTE}", fontsize=8)
    fig.tight_layout()
    return write_figure("pi2_prefill", table, fig, out_dir)


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


def pi2_memory(tracking_uri: str | None = None, out_dir: str | Path | None = None,
               experiment: str = "pi2_memory") -> FigureOutput:
    tidy = phone_runs(experiment, tracking_uri)
    table = memory_table(tidy)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for system, part in tidy[tidy.fits].groupby("system"):
        part = part.sort_values("pi2_dram_used_gb")
        ax.plot(part.pi2_dram_used_gb, part.sim_decode_tokens_per_s, "o-", label=system)
    ax.set_xlabel("DRAM used (GB)")
    ax.set_ylabel("decode tokens/s")
    ax.legend(fontsize=7)
    ax.set_title(f"speed vs memory for a model that fits, {NOTE}", fontsize=8)
    fig.tight_layout()
    return write_figure("pi2_memory", table, fig, out_dir)
