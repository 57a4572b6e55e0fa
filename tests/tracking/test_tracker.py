"""Tracking round-trip into a temporary SQLite store."""

from __future__ import annotations

import pytest

from powerbench.tracking import Tracker, flatten, ui_command
from powerbench.tracking.config import TrackingConfig


def test_flatten_nested():
    flat = flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2], "f": None})
    assert flat == {"a.b": "1", "a.c.d": "x", "e": "[1, 2]", "f": "null"}


def test_round_trip(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="test"))
    params = {f"group{i}": {f"key{j}": j for j in range(30)} for i in range(8)}  # 240 params
    with tracker.run("roundtrip", tags={"hardware": "pc_high"}):
        tracker.log_params(params)
        tracker.log_metrics({"decode_tokens_per_s": 12.5, "perplexity": 31.0,
                             "prefill_ms": float("nan")})
        tracker.log_text("hello", "notes/hello.txt")
    run = mlflow.tracking.MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {"decode_tokens_per_s": 12.5, "perplexity": 31.0}
    assert len(run.data.params) == 240 and run.data.params["group7.key29"] == "29"
    assert run.data.tags["hardware"] == "pc_high" and "git_sha" in run.data.tags
    runs = mlflow.search_runs(experiment_names=["test"], tracking_uri=uri) \
        if "tracking_uri" in mlflow.search_runs.__code__.co_varnames else None
    if runs is not None:
        assert len(runs) == 1


def test_failed_run_keeps_what_was_logged(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="test"))
    with pytest.raises(RuntimeError), tracker.run("boom"):
        tracker.log_metrics({"prefill_tokens_per_s": 100.0})
        raise RuntimeError("stage failed")
    run = mlflow.tracking.MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.metrics["prefill_tokens_per_s"] == 100.0


def test_parent_child(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = Tracker(TrackingConfig(uri=uri, experiment="test"))
    with parent.run("sweep"):
        pass
    monkeypatch.setenv("POWERBENCH_PARENT_RUN_ID", parent.run_id)
    child = Tracker(TrackingConfig(uri=uri, experiment="test"))
    with child.run("job0"):
        pass
    tags = mlflow.tracking.MlflowClient(uri).get_run(child.run_id).data.tags
    assert tags["mlflow.parentRunId"] == parent.run_id


def test_ui_command_names_the_store():
    parts = ui_command("sqlite:////tmp/x.db").split()
    assert parts[parts.index("--backend-store-uri") + 1] == "sqlite:////tmp/x.db"
    assert parts[parts.index("--default-artifact-root") + 1] == "file:///tmp/mlartifacts"
