"""A shared MLflow server on real PostgreSQL (loopback): a 2-job sweep, the server stopped
mid-sweep and restarted, and every result found on it (the stopped-time job via sync)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import mlflow
import pytest

from powerbench.tracking.jobs import JobLedger
from powerbench.tracking.queue import queued
from powerbench.tracking.server import ServerError, TrackingServer, pg_bin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(monkeypatch):
    try:
        pg_bin("initdb")
    except ServerError as err:
        pytest.skip(str(err))
    monkeypatch.setenv("POWERBENCH_CACHE", tempfile.mkdtemp(prefix="pb-queue-"))
    data = Path(tempfile.mkdtemp(prefix="pb-mlflow-server-"))  # postgres must reach it
    os.chmod(data, 0o755)
    srv = TrackingServer(data / "srv", port=free_port(), pg_port=free_port()).start()
    yield srv
    srv.stop()
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(os.environ["POWERBENCH_CACHE"], ignore_errors=True)


@pytest.mark.slow
def test_sweep_survives_the_server_stopping_midway(server, run_cli, monkeypatch, capsys):
    real = JobLedger.mark_finished

    def then_stop_the_server(self, out_dir, run_id):
        real(self, out_dir, run_id)
        server.stop_mlflow()  # after the first job: the second finds no server

    monkeypatch.setattr(JobLedger, "mark_finished", then_stop_the_server)
    run_cli(["--multirun", "model=opt_13b", "hardware=pc_low", "solver=greedy",
             "simulator=cost_model", "~engine", "bench.new_tokens=8,16",
             f"tracking.uri={server.uri}", "tracking.experiment=shared"])
    assert len(queued(server.uri)) >= 1  # the second job (and the parent's end) waited
    server.start_mlflow()
    run_cli(["sync", f"tracking.uri={server.uri}"])
    assert queued(server.uri) == []
    mlflow.set_tracking_uri(server.uri)
    runs = mlflow.search_runs(experiment_names=["shared"])
    jobs = runs[runs["tags.sweep"] != "true"]
    assert sorted(jobs["params.bench.new_tokens"].astype(int)) == [8, 16]
    assert (jobs["status"] == "FINISHED").all() and (jobs["metrics.sim_decode_tokens_per_s"] > 0).all()
    parent = runs[runs["tags.sweep"] == "true"]
    assert len(parent) == 1 and parent.iloc[0]["status"] == "FINISHED"
    assert set(jobs["tags.mlflow.parentRunId"]) == {parent.iloc[0]["run_id"]}


def test_the_server_runs_without_mlflow_job_execution_unless_asked(monkeypatch):
    from powerbench.tracking.server import server_env

    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", raising=False)
    assert server_env()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    monkeypatch.setenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "true")  # asked for: kept
    assert server_env()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "true"
