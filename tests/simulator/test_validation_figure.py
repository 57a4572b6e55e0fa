"""The validation figure reads the newest `powerbench validate` harness report."""

from __future__ import annotations

import pandas as pd

from powerbench.figures.validation import plot_validation, validation_table


def _run(start: int, model: str, decode: dict[str, float]) -> dict:
    row = {"tags.powerbench.study": "validation", "params.model": model,
           "start_time": pd.Timestamp(start, unit="s")}
    for engine, value in decode.items():
        for variant in ("profile", "calibrated"):
            row[f"metrics.{engine}.{variant}.measured_decode_tokens_per_s"] = value
            row[f"metrics.{engine}.{variant}.sim_decode_tokens_per_s"] = 2 * value
            row[f"metrics.{engine}.{variant}.sim_error_pct"] = 100.0
            row[f"metrics.{engine}.{variant}.measured_prefill_tokens_per_s"] = 5 * value
            row[f"metrics.{engine}.{variant}.sim_prefill_tokens_per_s"] = 5 * value
            row[f"metrics.{engine}.{variant}.sim_prefill_error_pct"] = 0.0
    return row


def test_the_newest_report_is_read_back_from_its_metrics(tmp_path):
    runs = pd.DataFrame([_run(1, "old", {"hybrid_cpu": 10.0, "dense": 20.0}),
                         _run(3, "tiny_relu", {"dense": 30.0, "sparse_cpu": 40.0}),
                         {"tags.powerbench.study": "decode", "start_time": pd.Timestamp(9, unit="s"),
                          "metrics.dense.none.decode_tokens_per_s": 1.0}])
    table = validation_table(runs)
    assert sorted(set(table.engine)) == ["dense", "sparse_cpu"] and len(table) == 4
    assert set(table.model) == {"tiny_relu"}
    dense = table[(table.engine == "dense") & (table.hardware_variant == "calibrated")].iloc[0]
    assert dense.measured_decode_tokens_per_s == 30.0 and dense.sim_error_pct == 100.0
    assert plot_validation(table, tmp_path / "v.png").exists()
    assert validation_table(runs.iloc[2:]).empty  # no validate report
