"""Operator-benchmark outputs, all in this one module: machine facts, the printed table,
CSV, speedup PNG and the MLflow run's params and metrics.

matplotlib and mlflow are imported inside the functions that need them, so the operator
package stays importable with torch alone.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from powerbench.ops.isa import cpu_model


@dataclass(frozen=True)
class ResultRow:
    """One measurement; field order is the CSV column order."""

    device: str
    backend: str  # a sparse backend, or the dense kernels torch_dense / ours_dense
    isa: str  # the compiled CPU kernels' ISA path ("" for torch)
    op: str
    shape: str
    dtype: str
    batch: int
    sparsity: float
    time_us: float
    dense_kernel: str  # the faster dense kernel for this (op, dtype, batch) in this run
    dense_time_us: float  # its median over the calls interleaved with this row's
    speedup: float  # dense_time_us / time_us
    achieved_gbps: float  # touched bytes / time
    dense_gbps: float  # the dense kernel's GB/s on the full matrices (all its calls)
    bandwidth_gbps: float  # the read probe of this run

    @property
    def ideal_speedup(self) -> float:
        """Reading a fraction 1 - s of the rows at the dense kernel's bandwidth."""
        return 1.0 / (1.0 - self.sparsity)

    @property
    def dense_fraction(self) -> float:
        """Achieved GB/s as a fraction of the dense kernel's."""
        return self.achieved_gbps / self.dense_gbps if self.dense_gbps else float("nan")

    @property
    def bandwidth_fraction(self) -> float:
        return self.achieved_gbps / self.bandwidth_gbps if self.bandwidth_gbps else float("nan")

    @property
    def label(self) -> str:
        return f"{self.backend}[{self.isa}]" if self.isa else self.backend


COLUMNS = (*(f.name for f in fields(ResultRow)), "ideal_speedup", "dense_fraction")
DENSE = ("torch_dense", "ours_dense")


def format_row(r: ResultRow) -> str:
    return (f"{r.op:9s} {r.shape:10s} {r.dtype:4s} b{r.batch:<2d} s={r.sparsity:4.2f} "
            f"{r.label:20s} {r.time_us:10.1f} us  dense {r.dense_time_us:10.1f} us  "
            f"x{r.speedup:6.2f} (ideal {r.ideal_speedup:5.2f})  {r.achieved_gbps:5.1f} GB/s "
            f"= {100 * r.dense_fraction:3.0f}% of dense, {100 * r.bandwidth_fraction:3.0f}% "
            f"of probe")


def format_table(rows: Sequence[ResultRow]) -> str:
    """Markdown: one line per (op, shape, dtype, batch, sparsity), sparse contenders side by
    side; the dense kernels' own lines (s = dense) name the faster one."""
    labels = list(dict.fromkeys(r.label for r in rows if r.backend not in DENSE))
    head = ["op", "shape", "dtype", "batch", "sparsity", "dense (kernel, us, GB/s)", "ideal"]
    for b in labels:
        head += [f"{b} us", "x dense", "GB/s", "% dense GB/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cells: dict[tuple, dict[str, ResultRow]] = {}
    for r in rows:
        key = (r.op, r.shape, r.dtype, r.batch, "dense" if r.backend in DENSE else r.sparsity)
        cells.setdefault(key, {})[r.label if r.backend not in DENSE else r.backend] = r
    for (op, shape, dtype, batch, sparsity), by in cells.items():
        any_row = next(iter(by.values()))
        lead = [op, shape, dtype, str(batch)]
        if sparsity == "dense":
            dense = " / ".join(f"{n}{'*' if n == r.dense_kernel else ''} {r.time_us:.0f} us "
                               f"{r.achieved_gbps:.1f} GB/s" for n, r in by.items())
            lines.append("| " + " | ".join([*lead, "dense", dense, ""] + [""] * 4 * len(labels))
                         + " |")
            continue
        line = [*lead, f"{100 * sparsity:.0f}%",
                f"{any_row.dense_kernel} {any_row.dense_time_us:.0f} "
                f"{any_row.dense_gbps:.1f}", f"{any_row.ideal_speedup:.2f}"]
        for b in labels:
            r = by.get(b)
            line += (["-"] * 4 if r is None else
                     [f"{r.time_us:.0f}", f"{r.speedup:.2f}", f"{r.achieved_gbps:.1f}",
                      f"{100 * r.dense_fraction:.0f}%"])
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


def write_csv(rows: Sequence[ResultRow], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            d = {**asdict(r), "ideal_speedup": r.ideal_speedup, "dense_fraction": r.dense_fraction}
            writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in d.items()})
    return path


def plot_speedup(rows: Sequence[ResultRow], path: Path) -> Path:
    """Speedup over the best dense kernel vs sparsity: a panel per (op) x (dtype, batch), one
    line per sparse contender (line style per shape), the ideal 1/(1-s) dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sparse = [r for r in rows if r.backend not in DENSE]
    ops = list(dict.fromkeys(r.op for r in sparse))
    variants = list(dict.fromkeys((r.dtype, r.batch) for r in sparse))
    labels = list(dict.fromkeys(r.label for r in sparse))
    shapes = list(dict.fromkeys(r.shape for r in sparse))
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(len(ops), len(variants), squeeze=False, sharex=True,
                             figsize=(4.2 * len(variants), 3.2 * len(ops)))
    sparsities = sorted({r.sparsity for r in sparse})
    for i, op in enumerate(ops):
        for j, (dtype, batch) in enumerate(variants):
            ax = axes[i][j]
            ideal = [1.0 / max(1.0 - s, 1e-9) for s in sparsities]
            ax.plot(sparsities, ideal, "k--", lw=1, label="ideal 1/(1-s)")
            ax.axhline(1.0, color="grey", lw=0.8)
            for bi, label in enumerate(labels):
                for si, shape in enumerate(shapes):
                    pts = sorted((r.sparsity, r.speedup) for r in sparse if r.op == op and
                                 r.dtype == dtype and r.batch == batch and
                                 r.label == label and r.shape == shape)
                    if pts:
                        ax.plot(*zip(*pts, strict=True), styles[si % len(styles)], marker="o",
                                ms=3, color=f"C{bi}", label=f"{label} {shape}")
            ax.set_yscale("log")
            ax.set_title(f"{op} {dtype} batch {batch}", fontsize=9)
            ax.grid(alpha=0.3, which="both")
            if i == len(ops) - 1:
                ax.set_xlabel("sparsity")
            if j == 0:
                ax.set_ylabel("speedup vs best dense")
    handles, legend = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, legend, loc="lower center", ncol=min(len(legend), 4), fontsize=8)
    device = rows[0].device if rows else "?"
    fig.suptitle(f"Sparse operators vs the best dense kernel on {device} (measured)")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def metric_prefix(r: ResultRow, with_isa: bool = False) -> str:
    """<backend>/<op>/<shape>/<dtype>/b<batch>/s<percent> (backend-isa when several paths ran)."""
    backend = f"{r.backend}-{r.isa}" if with_isa and r.isa and r.backend not in DENSE \
        else r.backend
    return f"{backend}/{r.op}/{r.shape}/{r.dtype}/b{r.batch}/s{round(100 * r.sparsity)}"


def metrics_of(rows: Sequence[ResultRow]) -> dict[str, float]:
    out: dict[str, float] = {}
    several = len({r.isa for r in rows if r.backend not in DENSE and r.isa}) > 1
    for r in rows:
        p = metric_prefix(r, several)
        out[f"speedup/{p}"] = r.speedup
        out[f"time_us/{p}"] = r.time_us
        out[f"achieved_gbps/{p}"] = r.achieved_gbps
        out[f"dense_fraction/{p}"] = r.dense_fraction
    if rows:
        out["bandwidth_gbps"] = rows[0].bandwidth_gbps
    return out


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def machine_facts(device: str, isa: str) -> dict[str, object]:
    """What a reader needs to place the numbers: CPU model, ISA path, threads, torch."""
    facts: dict[str, object] = {"device": device, "cpu": cpu_model(), "isa": isa or "-",
                                "threads": torch.get_num_threads(), "torch": torch.__version__}
    if device == "cuda" and torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name()
    return facts


def output_paths(out_dir: Path, device: str, tag: str) -> tuple[Path, Path]:
    """results/operators_<device>/operators<tag>.csv and .png."""
    stem = out_dir / f"operators_{device}" / f"operators{tag}"
    return stem.with_suffix(".csv"), stem.with_suffix(".png")


def write_outputs(rows: Sequence[ResultRow], out_dir: Path, device: str, tag: str,
                  plot: bool = True) -> list[Path]:
    csv_path, png_path = output_paths(out_dir, device, tag)
    outputs = [write_csv(rows, csv_path)]
    if plot:
        outputs.append(plot_speedup(rows, png_path))
    return outputs
