"""Fig. 16: sparse operators vs dense, MEASURED on this machine's CPU by `powerbench
bench-operators` (MLflow experiment `operators`, the latest run on one device).

The paper's figure times a [4096, 4096] x [4096, 1] product with rows zeroed for sparsity
against dense and a conventional sparse operator ("PyTorch sparse"). Here: that shape and
our headline FFN shape; the conventional operator as torch's CSR product with int64 indices
(torch's default) and with int32 (ops.csr_baseline), beside torch's gather-then-matmul
(sparse_torch) and our neuron-aware operator (sparse_cpu). The paper's text gives two
statements, compared as validation: the conventional operator beats dense only beyond 87%
sparsity, PowerInfer's CPU operator even below 10% (ours stands in for it here)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.figures.runs import FigureOutput, column
from powerbench.figures.simulated import (
    finished_runs,
    host_cpu,
    pyplot,
    save_figure,
)
from powerbench.ops.bench_report import DENSE
from powerbench.reproduce.target import POWERINFER_PAPER, Published, Target

# the harness's metric names: <backend>.<isa>.<op>.<shape>.<dtype>.<batch>.<sparsity %>.<column>
METRIC_KEY = re.compile(r"^metrics\.([^.]+)\.[^.]+\.([^.]+)\.([^.]+)\.([^.]+)\.(\d+)\.(\d+)\."
                        r"(speedup|time_us|dense_time_us)$")
METRIC_COLUMNS = ("time_us", "dense_time_us", "speedup")
FIG16_COLUMNS = ["device", "backend", "op", "shape", "dtype", "batch", "sparsity",
                 *METRIC_COLUMNS, "ideal_speedup"]


def operator_rows(run: pd.Series, device: str) -> pd.DataFrame:
    """One bench-operators run's `<backend>.<isa>.<op>.<shape>.<dtype>.<batch>.<percent>.
    <speedup|time_us|dense_time_us>` metrics back into rows."""
    cells: dict[tuple, dict[str, float]] = {}
    for name, value in run.items():
        match = METRIC_KEY.match(str(name))
        if match and pd.notna(value):
            backend, op, shape, dtype, batch, pct, kind = match.groups()
            cells.setdefault((backend, op, shape, dtype, int(batch), int(pct) / 100), {})[kind] = \
                float(value)
    rows = [dict(device=device, backend=k[0], op=k[1], shape=k[2], dtype=k[3], batch=k[4],
                 sparsity=k[5], **{c: v.get(c, np.nan) for c in METRIC_COLUMNS})
            for k, v in cells.items()]
    frame = pd.DataFrame(rows, columns=[c for c in FIG16_COLUMNS if c != "ideal_speedup"])
    frame["ideal_speedup"] = 1.0 / (1.0 - frame.sparsity)
    frame.loc[frame.backend.isin(DENSE), "ideal_speedup"] = 1.0
    return frame[FIG16_COLUMNS].sort_values(["op", "shape", "dtype", "batch", "backend",
                                             "sparsity"]).reset_index(drop=True)


def figure(tracking_uri: str | None = None, out_dir: str | Path | None = None,
          experiment: str = "operators", device: str = "cpu") -> FigureOutput:
    """Paper figure 16: speedup of the sparse operators over torch dense vs sparsity, from
    the latest `powerbench bench-operators` run on `device` (MEASURED on its CPU)."""
    runs = finished_runs(experiment, tracking_uri, f"powerbench bench-operators task.device={device}")
    runs = runs[column(runs, "params.task.device") == device]
    if runs.empty:
        raise LookupError(f"no bench-operators run on device {device!r} in MLflow experiment "
                          f"{experiment!r}; run: powerbench bench-operators task.device={device}")
    run = runs.sort_values("start_time").iloc[-1]
    table = operator_rows(run, device)
    if table.empty:
        raise LookupError(f"bench-operators run {run.run_id} logged no operator speedups")
    where = host_cpu(run.get("tags.host_cpu"))
    table.insert(1, "cpu_model", where)
    plt = pyplot()
    sparse = table[~table.backend.isin(DENSE)]
    panels = list(sparse.groupby(["op", "dtype", "batch"], sort=False))
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.5 * max(len(panels), 1), 4),
                             squeeze=False)
    for ax, ((op, dtype, batch), rows) in zip(axes[0], panels, strict=False):
        grid = np.sort(rows.sparsity.unique())
        ax.plot(grid, 1.0 / (1.0 - grid), "k--", lw=1, label="ideal 1/(1-s)")
        ax.axhline(1.0, color="grey", lw=0.8)
        if op == "row":  # the paper's conventional-operator crossover (validation only)
            ax.axvline(CONVENTIONAL_CROSSOVER, color="grey", lw=0.8, ls=":",
                       label=f"paper: PyTorch sparse wins past {CONVENTIONAL_CROSSOVER:.0%}")
        for i, ((backend, shape), line) in enumerate(rows.groupby(["backend", "shape"])):
            ax.plot(line.sparsity, line.speedup, "o-", ms=3, color=f"C{i}",
                    label=f"{backend} {shape}")
        ax.set_yscale("log")
        ax.set_xlabel("sparsity (share of inactive neurons)")
        ax.set_ylabel("speedup over the best dense kernel")
        ax.set_title(f"{op} {dtype} batch {batch}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6)
    fig.suptitle(f"Fig. 16 sparse operators vs dense, MEASURED on {where} ({device}, "
                 f"run {str(run.run_id)[:8]})", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return save_figure("fig16", table, fig, out_dir)


PAPER_SHAPE = "4096x4096"  # the paper's [4096, 4096] x [4096, 1] product: our `row` op
CONVENTIONAL_CROSSOVER = 0.87  # paper: conventional sparse operators beat dense only beyond


def crossover(backend: str, op: str = "row", shape: str = PAPER_SHAPE, dtype: str = "fp32",
              batch: int = 1, against: str | None = None):
    """`table -> float`: the sparsity from which `backend` beats the dense kernel, past
    the last sparsity where it loses (its speedup interpolated linearly to 1 between that
    point and the next); 0 if it never loses, NaN if it never wins or was not measured.
    Dense is the faster dense kernel (each row's own rounds); `against` names one instead
    (torch_dense: the speedups divided by that kernel's own speedup over the faster one)."""

    def ours(table: pd.DataFrame) -> float:
        case = table[(table.op == op) & (table["shape"] == shape) & (table.dtype == dtype) &
                     (table.batch == batch)]
        rows = case[case.backend == backend].sort_values("sparsity")
        s, v = rows.sparsity.to_numpy(float), rows.speedup.to_numpy(float)
        if against is not None and len(s):
            kernel = case[case.backend == against]
            v = v / (kernel.speedup.iloc[0] if len(kernel) else np.nan)
        losing = np.flatnonzero(v < 1.0)
        if not len(s) or (len(losing) and losing[-1] == len(s) - 1):
            return float("nan")
        if not len(losing):
            return 0.0
        i = losing[-1]
        return float(s[i] + (1.0 - v[i]) * (s[i + 1] - s[i]) / (v[i + 1] - v[i]))

    ours.__doc__ = (f"sparsity where {backend} {op} {shape} {dtype} b{batch} passes 1x "
                    f"{against or 'the faster dense kernel'}")
    return ours


TARGET = Target(
    name="fig16", figure=figure, simulated=False,
    command=("bench-operators", f"task.shapes=[{PAPER_SHAPE},4096x16384]", "task.dtypes=[fp32]",
             "task.batches=[1]", "task.sparsities=[0,0.1,0.5,0.8,0.85,0.9,0.95,0.99]",
             "task.backends=[sparse_torch,torch_csr,torch_csr_i32,sparse_cpu]",
             "task.tag=_headline"),
    # the reduced run: the quick timing at a quarter of the headline's weights (64 MiB per
    # matrix, still far beyond the last-level cache), 4 sparsities, one CSR baseline, so
    # `--quick` checks the whole path in seconds, not the headline number
    command_quick=("task.quick=true", "task.shapes=[2048x8192]",
                   "task.sparsities=[0,0.5,0.9,0.99]", "task.backends=[torch_csr,sparse_cpu]"),
    command_title="Sparse operators vs dense (measured on this machine's CPU)",
    command_setup=("The paper: PC-Low's CPU, a [4096, 4096] x [4096, 1] product with rows "
                   "zeroed, against dense and PyTorch sparse (its layout and index type not "
                   "given). Here: this machine's CPU, fp32, batch 1, all four ops at that "
                   "shape (its product is op row) and at the 4096x16384 FFN; PyTorch sparse "
                   "as its CSR product with int64 and with int32 indices (the CSR built "
                   "untimed), beside torch's gather-then-matmul and our operator, which "
                   "stands in for PowerInfer's. "
                   "PowerInfer's own operator on the same product, from its ggml: "
                   "`powerbench bench-powerinfer-ops task.shape=4096x4096 task.dtype=fp32` "
                   "(needs a PowerInfer checkout; results/operators_cpu)."),
    published=(
        Published("sparsity beyond which the conventional sparse operator beats dense "
                  "(torch CSR, int64 indices)", CONVENTIONAL_CROSSOVER, crossover("torch_csr"),
                  POWERINFER_PAPER.format("Fig. 16 text"), absolute=True, tolerance=0.05),
        Published("the same, torch CSR with int32 indices", CONVENTIONAL_CROSSOVER,
                  crossover("torch_csr_i32"),
                  POWERINFER_PAPER.format("Fig. 16 text"), absolute=True, tolerance=0.05,
                  scored=False),
        Published("the same against torch's dense matmul (the paper does not name its dense "
                  "kernel), int64 indices", CONVENTIONAL_CROSSOVER,
                  crossover("torch_csr", against="torch_dense"),
                  POWERINFER_PAPER.format("Fig. 16 text"), absolute=True, tolerance=0.05,
                  scored=False),
        Published("sparsity from which the neuron-aware CPU operator beats dense (paper: "
                  "PowerInfer's, below 10%; here ours)", 0.10, crossover("sparse_cpu"),
                  POWERINFER_PAPER.format("Fig. 16 text"), absolute=True, upper_bound=True),
    ))
