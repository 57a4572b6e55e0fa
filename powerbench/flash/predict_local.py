"""The simulator's flash tier predicting the measured `engine=flash` benchmark on this
machine (`powerbench bench-flash`, results/flash_bench.txt), at its DRAM budgets.

    python -m powerbench.flash.predict_local [results/flash_bench.txt] [out.csv]

Same workload as the benchmark: OPT-1.3B-shaped FFNs (fp16, one 8 KB bundled neuron per
cluster), the synthetic OPT profile with the benchmark's seed and trace length, hot share
0.5, LRU warm-started from the profile, 16 warm-up tokens, 96 measured tokens. The plan and
the cache policy are the ones simulator=phone replays (powerbench.simulator.flash_tier:
plan_segments + SegmentedNeuronCache), so the predicted traffic (MB/token, hit rates) is a
direct check of the replay against the engine.

Time per token: per layer max(compute, reads) + one read's latency (the engine's pipeline)
with
    compute  the MEASURED in-DRAM sparse engine's time per token / layers (an input from the
             same report: the `local` profile's cost model has no FFN-only sparse path
             calibrated for this engine, so compute is not predicted here)
    reads    missed bytes / the MEASURED random-read bandwidth at the cluster size and the
             engine's queue depth (the report's storage line; `local.yaml` has no flash tier
             and the phone's per-core-class UFS model does not apply to this disk);
             latency: the report's queue-depth-1 latency at that size.
The engine coalesces adjacent missed clusters into reads of up to 1 MB; we charge one
read per cluster (as simulator=phone does), so the prediction's read time is an upper
bound where misses are contiguous.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from powerbench.flash.bench import BenchShape, synthetic_profile_for
from powerbench.flash.cache import plan_segments
from powerbench.simulator.flash_tier import FlashPlan, FlashPolicy, replay

WARMUP, TOKENS, ROUNDS, HOT, SEED = 16, 32, 3, 0.5, 0  # run_flash_bench's defaults


@dataclass(frozen=True)
class Measured:
    dram_tok_s: float
    read_bw: float  # bytes/s, random reads of the cluster size at the engine's queue depth
    read_latency_s: float  # queue depth 1
    rows: dict[float, dict[str, float]]  # budget -> tok_s, mb_tok, hot, lru, wait_ms


def parse_report(text: str, block_kb: int = 8, queue_depth: int = 16) -> Measured:
    """The measured inputs and rows of a `bench-flash` report (results/flash_bench.txt)."""
    dram = re.search(r"^dram sparse\s+([\d.]+)", text, re.M)
    bw = re.search(rf"{block_kb}K qd{queue_depth} ([\d.]+) GB/s", text)
    lat = re.search(rf"{block_kb}K qd1 [\d.]+ GB/s \((\d+) us\)", text)
    if not (dram and bw and lat):
        raise ValueError(f"not a bench-flash report with a dram sparse row and {block_kb}K "
                         f"qd1/qd{queue_depth} storage figures")
    rows = {}
    for m in re.finditer(r"^flash (\d+)%\s+([\d.]+)\s+[\d.]+\s+\S+\s+([\d.]+)\s+[\d.]+\s+\d+"
                         r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text, re.M):
        rows[int(m[1]) / 100] = {"tok_s": float(m[2]), "mb_tok": float(m[3]),
                                 "hot": float(m[4]), "lru": float(m[5]),
                                 "wait_ms": float(m[6])}
    return Measured(float(dram[1]), float(bw[1]) * 1e9, float(lat[1]) * 1e-6, rows)


def predict(measured: Measured, budgets: tuple[float, ...] = (0.5, 0.25, 0.1),
            shape: BenchShape | None = None) -> pd.DataFrame:
    shape = shape or BenchShape()
    profile = synthetic_profile_for(shape, WARMUP + TOKENS * ROUNDS, SEED)
    n, L = shape.d_ffn, shape.n_layers
    neuron_bytes = 2 * shape.d_model * 2.0  # fc1 row + fc2 column, fp16, bundled
    freq = [layer.frequency for layer in profile.layers]
    masks = [layer.trace_masks() for layer in profile.layers]
    comp = 1.0 / measured.dram_tok_s / L
    out = []
    for b in budgets:
        seg = plan_segments(np.stack(freq), L, n, int(b * L * n), HOT)
        plan = FlashPlan(FlashPolicy.segmented, 1, seg, neuron_bytes, warm_tokens=WARMUP)
        t = replay(plan, [m[WARMUP:] for m in masks], [m[:WARMUP] for m in masks], freq)
        io = t.bytes / measured.read_bw
        step = (np.maximum(comp, io) + np.where(io > 0, measured.read_latency_s, 0.0)).sum(1)
        rates = t.hit_rates()
        row = {"budget": b, "pred_tok_s": 1.0 / step.mean(),
               "pred_mb_tok": t.bytes.sum(1).mean() / 1e6, "pred_hot": rates["hot"],
               "pred_lru": rates["lru"], "pred_io_ms": io.sum(1).mean() * 1e3}
        meas = measured.rows.get(b)
        if meas is not None:
            row |= {f"meas_{k}": v for k, v in meas.items()}
            row["tok_s_error"] = row["pred_tok_s"] / meas["tok_s"] - 1.0
            row["mb_tok_error"] = row["pred_mb_tok"] / meas["mb_tok"] - 1.0
        out.append(row)
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    report = Path(args[0] if args else "results/flash_bench.txt")
    out = Path(args[1] if len(args) > 1 else "results/flash_predict_local.csv")
    table = predict(parse_report(report.read_text()))
    table.to_csv(out, index=False, float_format="%.4g")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
