"""Reproduction targets of the paper's PC figures 10-13 (SIMULATED by the cost model).

Each target sweeps conf/experiment/<name>.yaml (plus `sweeps` where one Hydra sweep cannot
express the paper's combinations) and draws powerbench.figures.paper_pc.<name>. Published
rows: issue 15's calibration set only (the PowerInfer paper's headline numbers).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from powerbench.figures.e2e import e2e_from_runs
from powerbench.figures.paper_pc import fig10, fig11, fig12, fig13
from powerbench.reproduce.target import Published, Target

SOURCE = "PowerInfer paper (arXiv 2312.12456), {} text; issue 15 calibration set"


def stat(column: str, how: str = "mean", **where: object) -> Callable[[pd.DataFrame], float]:
    """`table -> float`: mean or max of `column` over the rows matching `where`
    (column=value), NaN (infeasible) rows left out."""

    def ours(table: pd.DataFrame) -> float:
        rows = table
        for key, value in where.items():
            rows = rows[rows[key] == value]
        values = pd.to_numeric(rows[column], errors="coerce").dropna()
        return float(getattr(values, how)()) if len(values) else float("nan")

    ours.__doc__ = f"{how} of {column} where {where or 'every row'}"
    return ours


def _calibration(label: str, value: float, ours: Callable[[pd.DataFrame], float],
                 figure: str, **kwargs: object) -> Published:
    return Published(label, value, ours, SOURCE.format(figure), calibration=True, **kwargs)


TARGETS: tuple[Target, ...] = (
    Target(
        name="fig10",
        title="End-to-end speed on PC-High, FP16 (PowerInfer vs llama.cpp)",
        figure=fig10,
        experiment="fig10",
        table=e2e_from_runs,
        quick=("model=opt_30b", "bench.prompt_tokens=64", "bench.new_tokens=128"),
        published=(
            _calibration("PowerInfer average tokens/s (4 models x outputs 8/128/512, input 64)",
                         8.32, stat("powerinfer_tokens_per_s", prompt_tokens=64), "Fig. 10"),
            _calibration("PowerInfer max tokens/s (input 64)", 16.06,
                         stat("powerinfer_tokens_per_s", "max", prompt_tokens=64), "Fig. 10"),
            _calibration("average speedup over llama.cpp (input 64)", 7.23,
                         stat("speedup", prompt_tokens=64), "Fig. 10"),
            _calibration("peak speedup over llama.cpp (input 64; paper: Falcon(ReLU)-40B)",
                         11.69, stat("speedup", "max", prompt_tokens=64), "Fig. 10"),
        ),
    ),
    Target(
        name="fig11",
        title="End-to-end speed on PC-Low, FP16 (PowerInfer vs llama.cpp)",
        figure=fig11,
        experiment="fig11",
        table=e2e_from_runs,
        quick=("model=opt_13b", "bench.prompt_tokens=64", "bench.new_tokens=128"),
        published=(
            _calibration("average speedup over llama.cpp (input 64)", 4.71,
                         stat("speedup", prompt_tokens=64), "Fig. 11"),
            _calibration("peak speedup over llama.cpp (input 64)", 7.06,
                         stat("speedup", "max", prompt_tokens=64), "Fig. 11"),
        ),
    ),
    Target(
        name="fig12",
        title="Neuron-load split GPU/CPU on PC-High (OPT-30B, OPT-66B FP16; OPT-175B INT4)",
        figure=fig12,
        experiment="fig12",
        table=e2e_from_runs,
        sweeps=((), ("model=opt_175b", "model.weight_dtype=int4")),
        quick=("model=opt_30b",),
        published=(
            _calibration("llama.cpp GPU share of the neuron load (mean of the 3 models)", 0.20,
                         stat("llamacpp_gpu_neuron_load_share"), "Fig. 12",
                         tolerance=0.10, absolute=True),
            _calibration("PowerInfer GPU share of the neuron load (mean of the 3 models)", 0.70,
                         stat("powerinfer_gpu_neuron_load_share"), "Fig. 12",
                         tolerance=0.10, absolute=True),
        ),
    ),
    Target(
        name="fig13",
        title="End-to-end speed with INT4 weights on PC-High and PC-Low",
        figure=fig13,
        experiment="fig13",
        table=e2e_from_runs,
        sweeps=((), ("hardware=pc_low", "model=opt_13b,opt_30b,llama_reglu_13b,bamboo_7b,opt_66b")),
        quick=("model=opt_30b", "bench.new_tokens=128"),
        published=(
            _calibration("PC-High INT4 PowerInfer average tokens/s (5 models x outputs "
                         "8/128/512)", 13.20,
                         stat("powerinfer_tokens_per_s", hardware="pc_high"), "Fig. 13"),
        ),
    ),
)
