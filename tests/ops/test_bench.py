"""The operator benchmark end to end on a tiny shape (`powerbench bench-operators` and the
torch-only script): CSV columns, PNG, table, numbers, MLflow run."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import fields, replace

import pytest
import torch

from powerbench.ops import bench
from powerbench.ops.bench_ceiling import PROBES
from powerbench.ops.bench_report import ResultRow, target_notes
from powerbench.ops.bench_timing import Call, Timer, TimingPolicy
from powerbench.paths import repo_root
from powerbench.schema_helpers import ConfigRangeError, parse_shape
from powerbench.tasks.bench_operators import operator_bench_config
from powerbench.tasks.config import BenchOperatorsTask

TINY = ["task.shapes=[64x256]", "task.dtypes=[fp32,fp16]", "task.batches=[1,3]",
        "task.sparsities=[0,0.1]", "task.timing.warmup=0", "task.timing.reps=1",
        "task.timing.min_time_s=0", "task.timing.flush_mb=0", "task.bandwidth_mb=16",
        "tracking=disabled"]


def test_tiny_benchmark_reports_through_the_harness(tmp_path, backends, cpu_ops, capsys,
                                                   run_cli):
    run_dir = tmp_path / "bench"
    run_cli(["bench-operators", *TINY, f"hydra.run.dir={run_dir}"])
    with (run_dir / "operators.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == (*(f.name for f in fields(ResultRow)), "sparsity_pct",
                                            "label", "ideal_speedup", "dense_fraction",
                                            "bandwidth_fraction")
        rows = list(reader)
    # 2 dtypes x 2 batches x 4 ops x (2 dense kernels + 2 sparsities x 2 backends)
    assert len(rows) == 2 * 2 * 4 * 6
    assert {r["backend"] for r in rows} == {"torch_dense", "ours_dense", "sparse_torch",
                                            "sparse_cpu"}
    isa = cpu_ops.isa
    for r in rows:
        t, dense, speedup = float(r["time_us"]), float(r["dense_time_us"]), float(r["speedup"])
        assert t > 0 and dense > 0 and speedup > 0 and float(r["bandwidth_gbps"]) > 0
        assert r["dense_kernel"] in ("torch_dense", "ours_dense")
        assert r["isa"] == (isa if r["backend"] in ("sparse_cpu", "ours_dense") else "")
        # the GB/s share is paired as the speedup: the speedup x the share of the bytes
        gbps, dense_gbps = float(r["achieved_gbps"]), float(r["dense_gbps"])
        assert math.isclose(float(r["dense_fraction"]), speedup * gbps * t / (dense_gbps * dense),
                            rel_tol=1e-3)
        # the share and the speedup read the same dense calls: at 0% they are one number
        if float(r["sparsity"]) == 0 and r["backend"] not in ("torch_dense", "ours_dense"):
            assert math.isclose(float(r["dense_fraction"]), speedup, rel_tol=1e-3)
        assert math.isclose(float(r["ideal_speedup"]), 1 / (1 - float(r["sparsity"])),
                            rel_tol=1e-3)
    # every sparse row has the gather probe's ceiling over its own rows; dense rows none
    for r in rows:
        ceil_t = float(r["ceiling_time_us"])
        if r["backend"] in ("torch_dense", "ours_dense"):
            assert ceil_t == 0 and r["ceiling_probe"] == ""
            assert r["ceiling_fraction"] in ("", "nan")
            continue
        assert ceil_t > 0 and r["ceiling_probe"] in PROBES
        assert float(r["ceiling_fraction"]) > 0 and float(r["ceiling_speedup"]) > 0
        n_active = round(256 * (1 - float(r["sparsity"])))
        es = 4 if r["dtype"] == "fp32" else 2
        weight_bytes = bench.MATRICES[r["op"]] * n_active * 64 * es
        assert math.isclose(float(r["ceiling_gbps"]), weight_bytes / ceil_t / 1e3, rel_tol=1e-3)
    # every sparse row has its rounds' spread of the speedup; dense rows none
    for r in rows:
        if r["backend"] in ("torch_dense", "ours_dense"):
            assert r["speedup_p25"] in ("", "nan") and r["speedup_p75"] in ("", "nan")
        else:  # the speedup is the median of the same per-round ratios
            assert 0 < float(r["speedup_p25"]) <= float(r["speedup"]) <= float(r["speedup_p75"])
    # the faster dense kernel is the reference: its own row's speedup is 1
    best = [r for r in rows if r["backend"] == r["dense_kernel"]]
    assert best and all(math.isclose(float(r["speedup"]), 1.0) for r in best)
    assert (run_dir / "operators.png").stat().st_size > 10_000
    meta = json.loads((run_dir / "operators.json").read_text())
    assert meta["machine"]["cpu_model"] and meta["params"]["isa"] == isa
    out = capsys.readouterr().out
    assert f"ISA path {isa}" in out and "target sparse_cpu[" + isa + "] row" in out
    assert "load average" in out


def test_touched_bytes_counts_active_rows_only():
    # 100 active rows of 4096 fp16 weights, 2 matrices, batch 1 in/out activations
    assert bench.touched_bytes("ffn_relu", 100, 4096, 1, 2, 2) == 2 * 100 * 4096 * 2 + 2 * 4096 * 2
    assert bench.touched_bytes("ffn_gated", 10, 8, 1, 4, 4) == 3 * 10 * 8 * 4 + 2 * 8 * 4


def test_quick_config_and_shape_parsing():
    cfg = operator_bench_config(BenchOperatorsTask(quick=True))
    assert cfg.shapes == ("4096x16384",) and cfg.dtypes == ("fp32",) and cfg.batches == (1,)
    assert parse_shape("task.shapes", "8192X28672") == (8192, 28672)
    for bad in ("4096", "4096x", "0x16384", "4096x16384x2", "ax16384"):
        with pytest.raises(ConfigRangeError, match=f"task.shapes={bad!r} is not d_model x d_ffn"):
            BenchOperatorsTask(shapes=[bad])
    full = operator_bench_config(BenchOperatorsTask())
    assert full.shapes == ("4096x11008", "4096x16384", "8192x28672")
    assert full.sparsities == (0.0, 0.1, 0.5, 0.8, 0.9, 0.95, 0.99)


@pytest.mark.slow
def test_mlflow_run_is_logged(tmp_path, backends, cpu_ops, run_cli):
    run_cli(["bench-operators", "task.shapes=[64x256]", "task.dtypes=[fp32]", "task.batches=[1]",
             "task.sparsities=[0.5]", "task.ops=[row]", "task.timing.warmup=0",
             "task.timing.reps=1", "task.timing.min_time_s=0", "task.timing.flush_mb=0",
             "task.bandwidth_mb=16", "task.plot=false"])
    import mlflow

    mlflow.set_tracking_uri(run_cli.store)
    runs = mlflow.search_runs(experiment_names=["operators"])
    assert len(runs) == 1
    key = f"metrics.sparse_cpu.{cpu_ops.isa}.row.64x256.fp32.1.50.speedup"
    assert key in runs.columns and runs[key].iloc[0] > 0


def test_percent_sparsities_are_refused_with_a_hint():
    from powerbench.ops.bench import OperatorBenchConfig

    with pytest.raises(ValueError, match=r"fractions in \[0, 1\); got \[10.0\] \(did you mean 0.1\?\)"):
        OperatorBenchConfig(sparsities=(0.0, 10.0))


def test_torch_only_script_runs_without_hydra(tmp_path, backends):
    """experiments/bench_gpu.py operators: the same benchmark where only torch is installed."""
    import runpy

    script = runpy.run_path(str(repo_root() / "experiments" / "bench_gpu.py"))
    argv = ["operators", "--shapes", "64x256", "--dtypes", "fp32", "--batches", "1",
            "--sparsities", "0.5", "--ops", "row", "--no-plot", "--out-dir", str(tmp_path)]
    assert script["main"](argv) == 0
    assert (tmp_path / "operators_cpu" / "operators.csv").exists()


def test_isa_paths_side_by_side(tmp_path, cpu_ops, run_cli):
    """task.isas times the compiled backend on several paths in one run, then restores."""
    before = cpu_ops.isa
    run_cli(["bench-operators", "task.shapes=[64x256]", "task.dtypes=[fp16]",
             "task.batches=[1]", "task.sparsities=[0.5]", "task.ops=[row]",
             "task.backends=[sparse_cpu]", "task.isas=[avx2,portable]", "task.timing.warmup=0",
             "task.timing.reps=1", "task.timing.min_time_s=0", "task.timing.flush_mb=0",
             "task.bandwidth_mb=16", "task.plot=false", "tracking=disabled",
             f"hydra.run.dir={tmp_path / 'bench'}"])
    with (tmp_path / "bench" / "operators.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["isa"] for r in rows if r["backend"] == "sparse_cpu"] == ["avx2", "portable"]
    assert cpu_ops.isa == before


def test_knob_variants_side_by_side(tmp_path, cpu_ops, run_cli):
    """task.variants times knob settings in one run (one row each, labelled), the dense
    kernels on the defaults, and leaves every knob at its default."""
    run_cli(["bench-operators", "task.shapes=[64x256]", "task.dtypes=[fp32]",
             "task.batches=[1]", "task.sparsities=[0.5]", "task.ops=[row]",
             "task.backends=[sparse_cpu]", "task.variants=[default,prefetch_bytes:4096+run_kb:8]",
             "task.timing.warmup=0", "task.timing.reps=1", "task.timing.min_time_s=0",
             "task.timing.flush_mb=0", "task.bandwidth_mb=16", "task.plot=false",
             "tracking=disabled", f"hydra.run.dir={tmp_path / 'bench'}"])
    with (tmp_path / "bench" / "operators.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    sparse = [r["variant"] for r in rows if r["backend"] == "sparse_cpu"]
    assert sparse == ["", "prefetch_bytes:4096+run_kb:8"]
    assert cpu_ops.knobs() == {s.name: s.default for s in cpu_ops.knob_specs()}


def test_call_setup_runs_untimed_before_each_call():
    seen: list[str] = []
    call = Call(lambda: seen.append("fn"), lambda: seen.append("setup"))
    timer = Timer("cpu", TimingPolicy(warmup=1, reps=2, min_time_s=0, flush_mb=0))
    assert len(timer.samples(call)[0]) == 2
    assert seen == ["setup", "fn"] * 3


def test_rounds_shuffle_so_no_call_always_follows_the_same_one():
    seen: list[str] = []
    timer = Timer("cpu", TimingPolicy(warmup=0, reps=2, min_time_s=0, flush_mb=0))
    fns = [lambda name=name: seen.append(name) for name in "abcd"]
    assert [len(t) for t in timer.samples(*fns)] == [4] * 4  # at least one round per call
    rounds = ["".join(seen[i:i + 4]) for i in range(0, 16, 4)]
    assert all(sorted(r) == list("abcd") for r in rounds)  # each call once per round
    before_b = {r[r.index("b") - 1] for r in rounds if not r.startswith("b")}
    assert len(rounds) == 4 and len(set(rounds)) > 1 and len(before_b) > 1


def test_the_speedup_and_its_spread_are_the_quartiles_of_the_per_round_ratios():
    # rounds side by side: dense / sparse = 2, 8, 3, 8; the medians' ratio would be 5 / 1
    assert bench.round_quartiles([2.0, 8.0, 6.0, 4.0], [1.0, 1.0, 2.0, 0.5]) == (2.75, 5.5, 8.0)
    p25, median, p75 = bench.round_quartiles([2.0], [1.0])
    assert median == 2.0 and math.isnan(p25) and math.isnan(p75)


def test_a_missed_target_says_whether_the_rounds_reach_it():
    def row(speedup, p75):
        return ResultRow(device="cpu", backend="sparse_cpu", isa="avx512", op="axpy",
                         shape="4096x16384", dtype="fp32", batch=1, sparsity=0.9,
                         time_us=1.0, dense_kernel="ours_dense", dense_time_us=speedup,
                         speedup=speedup, achieved_gbps=1.0, dense_gbps=1.0,
                         bandwidth_gbps=1.0, speedup_p25=speedup - 0.5, speedup_p75=p75)

    (note,) = target_notes([row(7.9, 8.3)])
    assert "90% 7.90x MISSED, inside the rounds' spread (p75 8.30x) (>= 8)" in note
    (note,) = target_notes([row(7.5, 7.9)])
    assert "90% 7.50x MISSED (>= 8)" in note
    (note,) = target_notes([row(8.1, 8.3)])
    assert "90% 8.10x (>= 8)" in note


def test_the_share_target_says_whether_the_gather_probe_reaches_it():
    def row(ceiling_speedup):  # 50% sparse, half the dense kernel's bytes, 1.84x dense
        return ResultRow(device="cpu", backend="sparse_cpu", isa="avx512", op="axpy",
                         shape="4096x16384", dtype="fp16", batch=1, sparsity=0.5,
                         time_us=1.0, dense_kernel="ours_dense", dense_time_us=1.0,
                         speedup=1.84, achieved_gbps=0.5, dense_gbps=1.0, bandwidth_gbps=1.0,
                         ceiling_time_us=0.5, ceiling_speedup=ceiling_speedup)

    (note,) = target_notes([row(1.86)])
    assert "worst 92.0% at 50% MISSED (>= 95%; ceiling 93.0%, unreachable here)" in note
    (note,) = target_notes([row(2.2)])
    assert "worst 92.0% at 50% MISSED (>= 95%; ceiling 110.0%)" in note
    (note,) = target_notes([replace(row(2.2), ceiling_time_us=0.0)])  # no probe: no word
    assert "MISSED (>= 95%)" in note


@pytest.mark.parametrize("op", bench.OPS)
def test_out_buffers_give_the_allocating_calls_values_in_reused_tensors(backends, cpu_ops, op):
    """With out_buffers every dense kernel and sparse_cpu write one tensor allocated at set-up
    (the same object on every call), with the values of the calls that allocate;
    sparse_torch cannot write in place and allocates (SparseOps.writes_out)."""
    gen = torch.Generator().manual_seed(5)
    layer = bench.LayerData.make(16, 48, torch.float32, "cpu", gen)
    x, coeffs = torch.rand(2, 16, generator=gen), torch.rand(2, 48, generator=gen) + 0.5
    idx = bench.active_ids(48, 0.5, gen, "cpu")
    made = [lambda on, lin=lin: bench.dense_fn(op, layer, x, coeffs, lin, on)
            for lin in bench.dense_kernels(bench.OperatorBenchConfig()).values()]
    made += [lambda on, ops=ops: bench.sparse_fn(op, ops, layer, x, coeffs, idx, on)
             for ops in backends.values()]
    for make, name in zip(made, ["torch_dense", "ours_dense", *backends], strict=True):
        fn = make(True)
        first, second = fn(), fn()
        reused = name != "sparse_torch"
        assert (first is second) == reused, name
        torch.testing.assert_close(second, make(False)(), rtol=1e-5, atol=1e-5, msg=name)


def test_cuda_rows_are_held_to_the_gpu_targets():
    """5x cuBLAS at 90%; 60% of the HBM bandwidth on the bytes touched at 50-95%."""
    def row(sparsity, speedup, gbps):
        return ResultRow(device="cuda", backend="sparse_cuda", isa="", op="row",
                         shape="4096x16384", dtype="fp16", batch=1, sparsity=sparsity,
                         time_us=1.0, dense_kernel="torch_dense", dense_time_us=speedup,
                         speedup=speedup, achieved_gbps=gbps, dense_gbps=3000.0,
                         bandwidth_gbps=3000.0)

    (note,) = target_notes([row(0.0, 0.9, 2700.0), row(0.5, 1.9, 2400.0),
                            row(0.9, 4.3, 1200.0), row(0.95, 5.5, 700.0)])
    assert "b1: 90% 4.30x MISSED (>= 5); share" in note  # no target at 0% on the GPU
    assert ("share of HBM bandwidth on the bytes touched at 50-95%: worst 23.3% at 95% "
            "MISSED (>= 60%)") in note
    (note,) = target_notes([row(0.5, 1.9, 2400.0), row(0.9, 6.0, 1900.0)])
    assert note.endswith("90% 6.00x (>= 5); share of HBM bandwidth on the bytes touched at "
                         "50-95%: worst 63.3% at 90% (>= 60%)")
