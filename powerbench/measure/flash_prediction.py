"""The simulator's flash tier predicting the measured `engine=flash` benchmark on this
machine (a `powerbench bench-flash` report), at its DRAM budgets.

    powerbench bench-flash task.mode=predict_local task.predict_report=<report.txt>

Same workload as the benchmark: OPT-1.3B-shaped FFNs (fp16, one 8 KB bundled neuron per
cluster), the synthetic OPT profile with the benchmark's seed and trace length, hot share
0.5, LRU warm-started from the profile, 16 warm-up tokens, 96 measured tokens. The plan and
the cache policy are the ones simulator=phone replays (powerbench.simulator.flash_tier:
plan_segments + SegmentedNeuronCache), so the predicted traffic (MB/token, hit rates) is a
direct check of the replay against the engine.

Time per token (`engine_costs`, the default): per layer call
    fixed + per_active x computed neurons + per_miss x missed clusters
    + per_task x min(task_cap, missed clusters)
(task_cap: io_threads for the thread-pool reader, 1 for native AIO: one batch per call;
least squares: tokens/s follows the mean call, see powerbench.measure.flash_overheads)
with the unit costs MEASURED by a microbenchmark of the engine's own layer path on the
benchmark's shape and weight file (powerbench.measure.flash_overheads, cached per machine and
engine version): the planning, the kernel on cache slots and the reads as the engine
achieves them on this machine's cores. The counts (computed neurons, misses) are the replay's. Nothing
is taken from the benchmark report being predicted except its measured rows (compared).

`storage` (the earlier model, kept for comparison): per layer max(compute, reads) + one
read's latency with compute = the MEASURED in-DRAM sparse engine's time per token / layers
and reads = missed bytes / the storage microbenchmark's random-read bandwidth at the
cluster size (qd16) + its qd1 latency; it leaves out the engine's planning and its
slower compute under concurrent reads, so it over-predicts (+94..+226% in the first run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from powerbench.measure.flash_ffn_inputs import BenchShape, synthetic_profile_for
from powerbench.measure.flash_overheads import EngineCosts
from powerbench.simulator.flash_tier import replay
from powerbench.solver.flash_plan import FlashPlan, FlashPolicy
from powerbench.solver.neuron_cache import plan_segments

WARMUP, TOKENS, ROUNDS, HOT, SEED = 16, 32, 3, 0.5, 0  # run_flash_bench's defaults


@dataclass(frozen=True)
class Measured:
    dram_tok_s: float
    read_bw: float  # bytes/s, random reads of the cluster size at the engine's queue depth
    read_latency_s: float  # queue depth 1
    rows: dict[float, dict[str, float]]  # budget -> tok_s, mb_tok, hot, lru, wait_ms
    trace_tokens: int = WARMUP + TOKENS * ROUNDS  # the profile's trace length (its draws)


def parse_report(text: str, block_kb: int = 8, queue_depth: int = 16) -> Measured:
    """The measured inputs and rows of a `bench-flash` report."""
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
    trace = re.search(r"^trace tokens (\d+)", text, re.M)
    return Measured(float(dram[1]), float(bw[1]) * 1e9, float(lat[1]) * 1e-6, rows,
                    int(trace[1]) if trace else WARMUP + TOKENS * ROUNDS)


def _relative_error(predicted: float, measured: float) -> float:
    """predicted / measured - 1; 0 when both are 0 (nothing read, as predicted), inf when
    only the measurement is 0."""
    if measured == 0:
        return 0.0 if predicted == 0 else float("inf")
    return float(predicted) / float(measured) - 1.0


def predict(measured: Measured, budgets: tuple[float, ...] = (0.5, 0.25, 0.1),
            shape: BenchShape | None = None, costs: EngineCosts | None = None
            ) -> pd.DataFrame:
    """Per budget: predicted vs measured. `costs`: the engine's measured unit costs (module
    docstring); None: the storage model (`storage_tok_s` only)."""
    shape = shape or BenchShape()
    profile = synthetic_profile_for(shape, measured.trace_tokens, SEED)
    end = WARMUP + TOKENS * ROUNDS  # the FFN-only rounds (whole-decode rounds follow)
    n, L = shape.d_ffn, shape.n_layers
    neuron_bytes = 2 * shape.d_model * 2.0  # fc1 row + fc2 column, fp16, bundled
    freq = [layer.frequency for layer in profile.layers]
    masks = [layer.trace_masks() for layer in profile.layers]
    comp = 1.0 / measured.dram_tok_s / L
    out = []
    for b in budgets:
        seg = plan_segments(np.stack(freq), L, n, int(b * L * n), HOT)
        plan = FlashPlan(FlashPolicy.segmented, 1, seg, neuron_bytes, warm_tokens=WARMUP)
        t = replay(plan, [m[WARMUP:end] for m in masks], [m[:WARMUP] for m in masks], freq)
        io = t.bytes / measured.read_bw
        step = (np.maximum(comp, io) + np.where(io > 0, measured.read_latency_s, 0.0)).sum(1)
        rates = t.hit_rates()
        storage_tok_s = 1.0 / step.mean()
        if costs is not None:  # lookups = computed neurons (1-neuron clusters), reads = misses
            step = costs.call_seconds(t.lookups, t.reads).sum(1)
        row = {"budget": b, "pred_tok_s": 1.0 / step.mean(), "storage_tok_s": storage_tok_s,
               "pred_mb_tok": t.bytes.sum(1).mean() / 1e6, "pred_hot": rates["hot"],
               "pred_lru": rates["lru"], "pred_io_ms": io.sum(1).mean() * 1e3}
        meas = measured.rows.get(b)
        if meas is not None:
            row |= {f"meas_{k}": v for k, v in meas.items()}
            row["tok_s_error"] = _relative_error(row["pred_tok_s"], meas["tok_s"])
            row["mb_tok_error"] = _relative_error(row["pred_mb_tok"], meas["mb_tok"])
        out.append(row)
    return pd.DataFrame(out)


def costs_line(costs: EngineCosts) -> str:
    """The engine's measured unit costs, in one line."""
    return (f"engine unit costs ({costs.measured_at}, load {costs.loadavg}): fixed "
            f"{costs.fixed_s * 1e6:.0f} us/call, {costs.per_active_s * 1e9:.0f} ns/neuron, "
            f"{costs.per_miss_s * 1e6:.1f} us/miss, {costs.per_task_s * 1e6:.1f} us/reader task "
            f"({costs.io_engine}, at most {costs.task_cap} per call; median fit error "
            f"{costs.median_rel_error:.0%} over {costs.calls} calls; {costs.fit} fit, fitted / "
            "measured summed call time per budget " + ", ".join(
                f"{b:.0%}: {r:.2f}" for b, r in zip(costs.budgets, costs.budget_fit,
                                                     strict=False)) + ")")
