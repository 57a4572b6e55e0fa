"""powerbench.flash.predict_local: the bench-flash report is parsed, and the flash tier's
replay of the benchmark's workload gives its traffic."""

from __future__ import annotations

from pathlib import Path

import pytest

from powerbench.flash.bench import BenchShape
from powerbench.flash.predict_local import parse_report, predict

REPORT = Path(__file__).resolve().parents[2] / "results" / "flash_bench.txt"


def test_parse_report_reads_inputs_and_rows():
    m = parse_report(REPORT.read_text())
    assert m.dram_tok_s == pytest.approx(363.6) and m.read_bw == pytest.approx(0.41e9)
    assert m.read_latency_s == pytest.approx(83e-6)
    assert set(m.rows) == {1.0, 0.5, 0.25, 0.1}
    assert m.rows[0.5]["mb_tok"] == pytest.approx(2.46) and m.rows[0.1]["hot"] == 0.53
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
