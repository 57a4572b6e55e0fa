"""Operator-benchmark outputs, all in this one module: the result rows as report records,
the target notes, the speedup PNG, and the CSV of the torch-only script (the Hydra task
prints, writes and logs through the measurement harness, powerbench.measure.harness).

matplotlib and mlflow are imported inside the functions that need them, so the operator
package stays importable with torch alone.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path


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
    # the median over the rounds of (the dense kernel's time / this call's time), the two
    # calls of a round side by side (ops.bench_timing.round_quartiles); a dense row: the faster
    # dense kernel's / this kernel's, over all their rounds
    speedup: float
    achieved_gbps: float  # touched bytes / time
    dense_gbps: float  # the dense kernel's GB/s on the full matrices (a sparse row: its
    # calls in the same rounds as that row's, as `speedup`; a dense row: all its calls)
    bandwidth_gbps: float  # the read probe of this run
    huge_page_fraction: float = 0.0  # share of the weight bytes on 2 MiB pages (dense and sparse)
    variant: str = ""  # the CPU kernels' knob setting timed ("" : the defaults; ops.cpu_knobs)
    # the read-only gather probe over the same weight rows in the same rounds (ops.bench_ceiling;
    # 0 / "": not measured): the fastest probe's median, its GB/s on the weight bytes, and
    # which probe it was
    # and, as medians over the rounds of the two calls' ratio (as the speedup): the share of
    # the ceiling this call reaches (probe time / this call's) and the speedup over dense the
    # probe itself shows (the dense kernel's time / probe time: the most an operator could)
    ceiling_time_us: float = 0.0
    ceiling_gbps: float = 0.0
    ceiling_probe: str = ""
    ceiling_fraction: float = float("nan")
    ceiling_speedup: float = float("nan")
    # the spread of the speedup over the rounds: quartiles of (the dense kernel's time / this
    # call's time) within each round (a sparse row; NaN for a dense row)
    speedup_p25: float = float("nan")
    speedup_p75: float = float("nan")

    @property
    def ideal_speedup(self) -> float:
        """Reading a fraction 1 - s of the rows at the dense kernel's bandwidth."""
        return 1.0 / (1.0 - self.sparsity)

    @property
    def dense_fraction(self) -> float:
        """Achieved GB/s as a fraction of the dense kernel's, paired as the speedup is: the
        speedup times the share of the dense kernel's bytes this call touches (a row's
        GB/s x time is its bytes)."""
        dense_bytes = self.dense_gbps * self.dense_time_us
        return (self.speedup * self.achieved_gbps * self.time_us / dense_bytes if dense_bytes
                else float("nan"))

    @property
    def bandwidth_fraction(self) -> float:
        return self.achieved_gbps / self.bandwidth_gbps if self.bandwidth_gbps else float("nan")

    @property
    def label(self) -> str:
        inside = ",".join(p for p in (self.isa, self.variant) if p)
        return f"{self.backend}[{inside}]" if inside else self.backend


DERIVED = ("ideal_speedup", "dense_fraction")
COLUMNS = (*(f.name for f in fields(ResultRow)), *DERIVED)
DENSE = ("torch_dense", "ours_dense")


def format_row(r: ResultRow) -> str:
    return (f"{r.op:9s} {r.shape:10s} {r.dtype:4s} b{r.batch:<2d} s={r.sparsity:4.2f} "
            f"{r.label:20s} {r.time_us:10.1f} us  dense {r.dense_time_us:10.1f} us  "
            f"x{r.speedup:6.2f} (ideal {r.ideal_speedup:5.2f}"
            + (f", rounds {r.speedup_p25:.2f}-{r.speedup_p75:.2f}" if math.isfinite(r.speedup_p75)
               else "") + f")  {r.achieved_gbps:5.1f} GB/s "
            f"= {100 * r.dense_fraction:3.0f}% of dense, {100 * r.bandwidth_fraction:3.0f}% "
            f"of probe" + (f"; ceiling {r.ceiling_gbps:5.1f} GB/s x{r.ceiling_speedup:6.2f}, "
                           f"{100 * r.ceiling_fraction:3.0f}% of it" if r.ceiling_time_us else ""))


def record(r: ResultRow) -> dict[str, object]:
    """The row as the report's record: its fields, the sparsity in percent (row keys and
    metric names), and the derived ratios."""
    return {**asdict(r), "sparsity_pct": round(100 * r.sparsity), "label": r.label,
            **{k: getattr(r, k) for k in DERIVED}, "bandwidth_fraction": r.bandwidth_fraction}


@dataclass(frozen=True)
class Targets:
    """One device's operator targets: the speedup over dense at given sparsities, and a
    bandwidth share (a ResultRow ratio, `share`) over a sparsity range."""

    speedups: dict[float, float]
    share: str  # dense_fraction | bandwidth_fraction
    share_words: str
    share_range: tuple[float, float]  # sparsities, both ends included
    share_min: float


# CPU: a sparse operator reads at the dense kernel's GB/s, so it beats dense at 10%.
# CUDA: at least 5x cuBLAS at 90%, and 60% of the measured HBM bandwidth on the bytes it
# touches at 50-95% (a 90% call reads 1/10 of the matrix: launch and tail latency weigh).
TARGETS = {
    "cpu": Targets({0.0: 0.95, 0.1: 1.0, 0.5: 1.8, 0.9: 8.0}, "dense_fraction",
                   "GB/s share of dense", (0.0, 0.5), 0.95),
    "cuda": Targets({0.9: 5.0}, "bandwidth_fraction", "share of HBM bandwidth on the bytes "
                    "touched", (0.5, 0.95), 0.60),
}


def target_notes(rows: Sequence[ResultRow]) -> list[str]:
    """One line per sparse contender at batch 1: the speedups at the target sparsities
    against its device's targets (TARGETS), and the worst bandwidth share in their range."""
    notes = []
    groups: dict[tuple, list[ResultRow]] = {}
    for r in rows:
        if r.backend not in DENSE and r.batch == 1:
            groups.setdefault((r.device.split(":")[0], r.label, r.op, r.shape, r.dtype),
                              []).append(r)
    for (device, label, op, shape, dtype), rs in groups.items():
        targets = TARGETS.get(device)
        if targets is None:
            continue
        by = {r.sparsity: r for r in rs}
        parts = [f"{100 * s:.0f}% {by[s].speedup:.2f}x{_verdict(by[s], t)}"
                 f" (>= {t:g}{_ceiling_word(by[s], t)})" for s, t in targets.speedups.items()
                 if s in by]
        low, high = targets.share_range
        inside = [r for r in rs if low <= r.sparsity <= high]
        if inside:
            worst = min(inside, key=lambda r: getattr(r, targets.share))
            share = getattr(worst, targets.share)
            ceiling = (_ceiling_share(worst, targets.share_min)
                       if targets.share == "dense_fraction" else "")
            parts.append(f"{targets.share_words} at {100 * low:.0f}-{100 * high:.0f}%: worst "
                         f"{100 * share:.1f}% at {100 * worst.sparsity:.0f}%"
                         f"{'' if share >= targets.share_min else ' MISSED'} "
                         f"(>= {100 * targets.share_min:.0f}%{ceiling})")
        if parts:
            notes.append(f"target {label} {op} {shape} {dtype} b1: " + "; ".join(parts))
    return notes


def _verdict(r: ResultRow, target: float) -> str:
    """'' when the speedup meets the target; ' MISSED', and whether the target lies inside
    the rounds' own spread (their upper quartile reaches it)."""
    if r.speedup >= target:
        return ""
    inside = r.speedup_p75 >= target  # False for NaN
    return " MISSED" + (f", inside the rounds' spread (p75 {r.speedup_p75:.2f}x)" if inside
                        else "")


def _ceiling_word(r: ResultRow, target: float) -> str:
    """'; ceiling 7.9x, unreachable here' beside a speedup target (nothing unmeasured)."""
    if not r.ceiling_time_us:
        return ""
    return (f"; ceiling {r.ceiling_speedup:.2f}x"
            f"{'' if r.ceiling_speedup >= target else ', unreachable here'}")


def _ceiling_share(r: ResultRow, target: float) -> str:
    """'; ceiling 92.8%, unreachable here' beside the GB/s-share target: the share the gather
    probe over the same rows reaches in the same rounds (the row's share scaled by the
    probe's speedup over its own)."""
    if not r.ceiling_time_us:
        return ""
    probe = r.dense_fraction * r.ceiling_speedup / r.speedup
    return f"; ceiling {100 * probe:.1f}%{'' if probe >= target else ', unreachable here'}"


def ceiling_notes(rows: Sequence[ResultRow], read_gbps: float) -> list[str]:
    """How the ceiling was measured, and the gather probe's GB/s at 0% sparsity against
    the STREAM-like read probe (it must not be slower than a plain read of the bytes)."""
    full = {(r.op, r.dtype, r.batch): r for r in rows
            if r.backend not in DENSE and r.sparsity == 0.0 and r.ceiling_time_us}
    if not full:
        return []
    lo = min(full.values(), key=lambda r: r.ceiling_gbps)
    hi = max(full.values(), key=lambda r: r.ceiling_gbps)
    return ["ceiling = a read-only gather probe over the same weight rows (plain vector loads "
            "and an integer sum, no conversion, no FMA; the fastest of the operators' 4-slot "
            "schedule, the same with 8 slots, and merged runs of adjacent rows), timed in "
            "the same rounds; "
            "ceiling_gbps on the weight bytes, ceiling_fraction = probe time / op time, "
            "ceiling_speedup = dense time / probe time (the most an operator could show here), "
            "each the median over the rounds of the two calls' ratio",
            f"gather probe at 0% sparsity: {lo.ceiling_gbps:.1f}-{hi.ceiling_gbps:.1f} GB/s "
            f"({100 * lo.ceiling_gbps / read_gbps:.0f}-{100 * hi.ceiling_gbps / read_gbps:.0f}% "
            f"of the read probe's {read_gbps:.1f} GB/s)"]


def huge_page_note(rows: Sequence[ResultRow], asked: bool) -> str:
    """Whether the weights were on huge pages: asked for or not, and the share per dtype."""
    shares = {r.dtype: r.huge_page_fraction for r in rows}
    got = ", ".join(f"{d} {100 * f:.0f}%" for d, f in shares.items())
    return (f"huge pages: {'asked for' if asked else 'not asked for'} (task.huge_pages="
            f"{str(asked).lower()}); share of the weight bytes (dense and sparse alike) on "
            f"2 MiB pages: {got or '-'}")


def out_buffer_note(on: bool) -> str:
    """Where the timed calls put their results."""
    if on:
        return ("results: written into tensors allocated once per cell (out=), the dense "
                "kernels' (hidden activations included) and sparse_cpu's alike, as a decode "
                "loop's workspace (task.out_buffers=true); backends that cannot write one in "
                "place (sparse_torch, sparse_cuda) and the CSR baselines allocate theirs")
    return "results: every call allocates its own (task.out_buffers=false)"


def write_csv(rows: Sequence[ResultRow], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            d = {**asdict(r), **{k: getattr(r, k) for k in DERIVED}}
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


def write_outputs(rows: Sequence[ResultRow], out_dir: Path, device: str, tag: str,
                  plot: bool = True) -> list[Path]:
    """<out_dir>/operators_<device>/operators<tag>.csv and .png (the torch-only script; the
    Hydra task reports through the measurement harness instead)."""
    stem = out_dir / f"operators_{device}" / f"operators{tag}"
    outputs = [write_csv(rows, stem.with_suffix(".csv"))]
    if plot:
        outputs.append(plot_speedup(rows, stem.with_suffix(".png")))
    return outputs
