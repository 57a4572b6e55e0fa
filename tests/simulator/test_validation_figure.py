"""The validation table keeps only the newest `powerbench validate` invocation."""

from __future__ import annotations

import pandas as pd

from powerbench.figures.validation import validation_table


def _run(batch: str, engine: str, start: int, decode: float) -> dict:
    return {"tags.validation": "true", "tags.validation_batch": batch,
            "tags.hardware_variant": "calibrated", "params.engine.name": engine,
            "params.model.name": "tiny_relu", "params.bench.prompt_tokens": "64",
            "params.bench.new_tokens": "64", "params.bench.batch_size": "1",
            "start_time": pd.Timestamp(start, unit="s"),
            "metrics.decode_tokens_per_s": decode, "metrics.sim_error_pct": 1.0}


def test_rows_of_older_invocations_are_dropped():
    runs = pd.DataFrame([_run("old", "hybrid_cpu", 1, 10.0), _run("old", "dense", 2, 20.0),
                         _run("new", "dense", 3, 30.0), _run("new", "sparse_cpu", 4, 40.0)])
    table = validation_table(runs)
    assert sorted(table.engine) == ["dense", "sparse_cpu"]
    assert table.set_index("engine").loc["dense", "measured_decode_tokens_per_s"] == 30.0
