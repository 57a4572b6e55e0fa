"""powerbench.measure.flash_prediction: the bench-flash report is parsed, and the flash tier's
replay of the benchmark's workload gives its traffic."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from powerbench.measure.flash_ffn_inputs import BenchShape
from powerbench.measure.flash_overheads import EngineCosts, robust_fit
from powerbench.measure.flash_prediction import parse_report, predict

REPORT = Path(__file__).resolve().parent / "data" / "flash_bench_report.txt"  # a 2026-11-24 bench-flash report


def test_parse_report_reads_inputs_and_rows():
    m = parse_report(REPORT.read_text())
    assert m.dram_tok_s > 0 and m.read_bw > 0 and 0 < m.read_latency_s < 0.1
    assert set(m.rows) == {1.0, 0.5, 0.25, 0.1}
    text = REPORT.read_text()

    def row(budget: str) -> list[str]:
        return next(line.split() for line in text.splitlines()
                    if re.match(rf"flash {budget}%\s+\d", line))

    assert m.rows[0.5]["mb_tok"] == float(row("50")[5])  # MB/tok column
    assert m.rows[0.1]["hot"] == float(row("10")[8])  # hot hit rate column
    with pytest.raises(ValueError, match="bench-flash report"):
        parse_report("nothing here")


def test_predict_smaller_budgets_read_more():
    m = parse_report(REPORT.read_text())
    small = BenchShape(name="tiny", n_layers=2, d_model=64, d_ffn=256)
    table = predict(m, budgets=(0.5, 0.1), shape=small)
    assert list(table.budget) == [0.5, 0.1]
    assert table.pred_mb_tok.iloc[1] > table.pred_mb_tok.iloc[0] > 0
    assert table.pred_tok_s.iloc[0] > table.pred_tok_s.iloc[1] > 0
    assert {"meas_tok_s", "tok_s_error", "mb_tok_error"} <= set(table.columns)


def test_engine_costs_predict_from_replayed_counts_and_fit_ignores_outliers():
    m = parse_report(REPORT.read_text())
    small = BenchShape(name="tiny", n_layers=2, d_model=64, d_ffn=256)
    costs = EngineCosts(fixed_s=1e-4, per_active_s=0.0, per_miss_s=1e-5, per_task_s=0.0,
                        io_threads=16, calls=1,
                        median_rel_error=0.0, loadavg=0.0, layers=2,
                        budgets=(1.0,), seconds=0.0)
    table = predict(m, budgets=(1.0, 0.1), shape=small, costs=costs)
    assert table.pred_tok_s.iloc[0] == pytest.approx(1 / (2 * 1e-4))  # no misses at 100%
    assert table.pred_tok_s.iloc[1] < table.pred_tok_s.iloc[0]
    assert m.rows[1.0]["mb_tok"] == 0 and table.mb_tok_error.iloc[0] == 0.0  # 0 as predicted
    rng = np.random.default_rng(0)
    miss = rng.integers(0, 50, 200)
    a = np.column_stack([np.ones(200), rng.integers(100, 300, 200), miss,
                         np.minimum(miss, 16)])
    y = a @ np.array([2e-4, 1e-6, 3e-5, 5e-5])
    y[::10] *= 20  # preempted calls
    assert robust_fit(a, y) == pytest.approx([2e-4, 1e-6, 3e-5, 5e-5], rel=1e-3)


def test_engine_costs_cache_key_and_reader_tasks(monkeypatch, tmp_path):
    from powerbench.measure import flash_overheads as overheads

    assert overheads.engine_version(layers=4) != overheads.engine_version(layers=24)
    assert overheads.engine_version() == overheads.engine_version()
    base = dict(fixed_s=0.0, per_active_s=0.0, per_miss_s=0.0, per_task_s=1.0, io_threads=16,
                calls=1, median_rel_error=0.0, loadavg=0.0, layers=1,
                budgets=(1.0,), seconds=0.0)
    misses = np.array([0, 3, 40])
    aio = EngineCosts(**base, io_engine="aio", task_cap=1)
    threads = EngineCosts(**base, io_engine="threads", task_cap=16)
    assert list(aio.call_seconds(np.zeros(3), misses)) == [0, 1, 1]  # one batch per call
    assert list(threads.call_seconds(np.zeros(3), misses)) == [0, 3, 16]
    # a cached fit of another engine version is remeasured, the same one reused
    monkeypatch.setattr(overheads, "cache_dir", lambda: tmp_path)
    calls = []
    monkeypatch.setattr(overheads, "measure_engine_costs",
                        lambda **kw: calls.append(kw) or aio)
    assert overheads.engine_costs(layers=2) == aio and overheads.engine_costs(layers=2) == aio
    assert len(calls) == 1
    monkeypatch.setattr(overheads, "engine_version", lambda **kw: "another")
    overheads.engine_costs(layers=2)
    assert len(calls) == 2


def test_mean_fit_charges_the_tail_the_median_fit_drops():
    """Calls with reads wait for their slowest read: a right-skewed tail. Least squares
    (fit="mean") charges it, least absolute deviations (fit="median") does not."""
    from powerbench.measure import flash_overheads as overheads

    rng = np.random.default_rng(1)
    miss = rng.integers(0, 100, 2000).astype(float)
    a = np.column_stack([np.ones(miss.size), miss])
    y = 1e-4 + 2e-5 * miss * (1 + rng.exponential(0.5, miss.size))  # mean factor 1.5
    mean = overheads._nnls(a, y)
    median = robust_fit(a, y)
    assert (a @ mean).sum() == pytest.approx(y.sum(), rel=1e-6)
    assert (a @ median).sum() < 0.95 * y.sum()
    with pytest.raises(ValueError, match="fit"):
        overheads.measure_engine_costs(fit="mode")
