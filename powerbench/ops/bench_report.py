"""Operator-benchmark outputs: the printed table, CSV, speedup PNG and the MLflow run.

matplotlib and mlflow are imported inside the functions that need them, so the operator
package stays importable with torch alone.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class ResultRow:
    """One measurement; field order is the CSV column order."""

    device: str
    backend: str
    op: str
    shape: str
    dtype: str
    batch: int
    sparsity: float
    time_us: float
    dense_time_us: float
    speedup: float
    achieved_gbps: float
    bandwidth_gbps: float

    @property
    def bandwidth_fraction(self) -> float:
        return self.achieved_gbps / self.bandwidth_gbps if self.bandwidth_gbps else float("nan")


COLUMNS = tuple(f.name for f in fields(ResultRow))


def format_row(r: ResultRow) -> str:
    return (f"{r.op:9s} {r.shape:10s} {r.dtype:4s} b{r.batch:<2d} s={r.sparsity:4.2f} "
            f"{r.backend:12s} {r.time_us:10.1f} us  dense {r.dense_time_us:10.1f} us  "
            f"x{r.speedup:7.2f}  {r.achieved_gbps:6.1f} GB/s ({100 * r.bandwidth_fraction:3.0f}%)")


def format_table(rows: Sequence[ResultRow]) -> str:
    """One line per (op, shape, dtype, batch, sparsity); backends side by side."""
    backends = list(dict.fromkeys(r.backend for r in rows if r.backend != "torch_dense"))
    dense = {(r.op, r.shape, r.dtype, r.batch): r for r in rows if r.backend == "torch_dense"}
    cells: dict[tuple, dict[str, ResultRow]] = {}
    for r in rows:
        if r.backend != "torch_dense":
            cells.setdefault((r.op, r.shape, r.dtype, r.batch, r.sparsity), {})[r.backend] = r
    head = f"{'op':9s} {'shape':10s} {'dtype':5s} {'b':>2s} {'spars':>5s} {'dense_us':>9s} " \
           f"{'dGB/s':>5s}"
    for b in backends:
        head += f" | {b + ' us':>15s} {'speedup':>7s} {'GB/s':>5s} {'%bw':>4s}"
    lines = [head, "-" * len(head)]
    for key, by_backend in cells.items():
        op, shape, dtype, batch, sparsity = key
        d = dense.get((op, shape, dtype, batch))
        line = (f"{op:9s} {shape:10s} {dtype:5s} {batch:2d} {100 * sparsity:4.0f}% "
                f"{d.time_us if d else float('nan'):9.0f} "
                f"{d.achieved_gbps if d else float('nan'):5.1f}")
        for b in backends:
            r = by_backend.get(b)
            if r is None:
                line += f" | {'-':>15s} {'-':>7s} {'-':>5s} {'-':>4s}"
            else:
                line += (f" | {r.time_us:15.1f} {r.speedup:7.2f} {r.achieved_gbps:5.1f} "
                         f"{100 * r.bandwidth_fraction:3.0f}%")
        lines.append(line)
    return "\n".join(lines)


def write_csv(rows: Sequence[ResultRow], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            d = asdict(r)
            writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in d.items()})
    return path


def plot_speedup(rows: Sequence[ResultRow], path: Path) -> Path:
    """Speedup over torch dense vs sparsity: a panel per (op) x (dtype, batch), one line per
    backend (line style per shape), the ideal 1/(1-s) dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sparse = [r for r in rows if r.backend != "torch_dense"]
    ops = list(dict.fromkeys(r.op for r in sparse))
    variants = list(dict.fromkeys((r.dtype, r.batch) for r in sparse))
    backends = list(dict.fromkeys(r.backend for r in sparse))
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
            for bi, backend in enumerate(backends):
                for si, shape in enumerate(shapes):
                    pts = sorted((r.sparsity, r.speedup) for r in sparse if r.op == op and
                                 r.dtype == dtype and r.batch == batch and
                                 r.backend == backend and r.shape == shape)
                    if pts:
                        ax.plot(*zip(*pts, strict=True), styles[si % len(styles)], marker="o",
                                ms=3, color=f"C{bi}", label=f"{backend} {shape}")
            ax.set_yscale("log")
            ax.set_title(f"{op} {dtype} batch {batch}", fontsize=9)
            ax.grid(alpha=0.3, which="both")
            if i == len(ops) - 1:
                ax.set_xlabel("sparsity")
            if j == 0:
                ax.set_ylabel("speedup vs torch dense")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
    device = rows[0].device if rows else "?"
    fig.suptitle(f"Sparse operators vs torch.matmul on {device} (measured)")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def metric_prefix(r: ResultRow) -> str:
    return f"{r.backend}/{r.op}/{r.shape}/{r.dtype}/b{r.batch}/s{round(100 * r.sparsity)}"


def metrics_of(rows: Sequence[ResultRow]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        p = metric_prefix(r)
        out[f"speedup/{p}"] = r.speedup
        out[f"time_us/{p}"] = r.time_us
        out[f"achieved_gbps/{p}"] = r.achieved_gbps
    if rows:
        out["bandwidth_gbps"] = rows[0].bandwidth_gbps
    return out
