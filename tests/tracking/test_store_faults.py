"""Faults of the tracking store (issue 28): a SQLite store that cannot open fails in
seconds with its path; an external store keeps its artifacts beside it; experiments open
on their runs; a failed run says why; `ui` prints the link to the runs."""

from __future__ import annotations

import time

import mlflow
import pytest

from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig
from powerbench.tracking.store import TrackingStoreError, runs_link
from powerbench.tracking.tracker import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, FAILURE_TAG

SIM = ["model=opt_13b", "hardware=pc_low", "solver=greedy", "simulator=cost_model", "~engine"]


@pytest.mark.parametrize("uri", ["sqlite:////proc/x.db", "sqlite:////proc/powerbench/x.db"])
def test_sqlite_store_that_cannot_open_fails_in_seconds_with_its_path(run_cli, capsys, uri):
    start = time.perf_counter()
    with pytest.raises(SystemExit):
        run_cli([*SIM, f"tracking.uri={uri}"])
    assert time.perf_counter() - start < 10  # was 226 s of SQLAlchemy retries
    err = capsys.readouterr().err
    assert uri.removeprefix("sqlite:///").rsplit("/", 1)[0] in err
    assert "powerbench sync" not in err  # a local store is not a server coming back


def test_a_file_that_is_not_a_database_fails_naming_it(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("this is not SQLite " * 100)
    with pytest.raises(TrackingStoreError, match=f"cannot open {path}"):
        Tracker(TrackingConfig(uri=f"sqlite:///{path}")).reachable()


def test_external_sqlite_store_keeps_its_artifacts_beside_it(tmp_path, monkeypatch):
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path / "cache"))
    store = tmp_path / "elsewhere" / "other.db"
    tracker = Tracker(TrackingConfig(uri=f"sqlite:///{store}", experiment="beside"))
    artifact = tmp_path / "table.csv"
    artifact.write_text("a,b\n1,2\n")
    with tracker.run("job"):
        tracker.log_artifact(artifact, "tables")
    beside = store.parent / "mlartifacts" / "beside"
    assert list(beside.rglob("table.csv")), "artifact not beside the store"
    assert not (tmp_path / "cache" / "mlartifacts").exists()


def test_experiment_is_created_as_model_training_so_the_dashboard_opens_on_runs(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    Tracker(TrackingConfig(uri=uri, experiment="kind")).experiment_id()
    assert client.get_experiment_by_name("kind").tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    client.create_experiment("older")  # made before this fix: no kind, gets one
    Tracker(TrackingConfig(uri=uri, experiment="older")).experiment_id()
    assert client.get_experiment_by_name("older").tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


def test_failed_run_logs_the_reason(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="why"))
    with pytest.raises(FloatingPointError), tracker.run("job"):
        raise FloatingPointError("eval stage: NaN in the logits of layer lm_head")
    run = mlflow.tracking.MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags[FAILURE_TAG] == ("FloatingPointError: eval stage: NaN in the logits "
                                          "of layer lm_head")


def test_ui_prints_the_direct_link_to_the_runs(run_cli, capsys):
    run_cli(["ui", "tracking.experiment=linked"])
    out = capsys.readouterr().out
    experiment_id = mlflow.tracking.MlflowClient(run_cli.store).get_experiment_by_name(
        "linked").experiment_id
    assert (f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs"
            "?workflowType=machine_learning") in out
    assert "mlflow ui --backend-store-uri" in out


def test_runs_link_of_a_server_is_on_that_server():
    assert runs_link("http://host:5000/", "7") == \
        "http://host:5000/#/experiments/7/runs?workflowType=machine_learning"
