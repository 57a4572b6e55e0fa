"""The four faults of a long sweep: each must cost no result.

server down -> results kept and queued, later synced without duplicates; sweep killed
mid-way -> the re-run skips finished jobs; unwritable store -> immediate clear error;
job killed -> its run ends KILLED.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig
from powerbench.tracking.queue import queued
from powerbench.tracking.server import server_env
from powerbench.tracking.store import TrackingStoreError

SIM = ["model=opt_13b", "hardware=pc_low", "solver=greedy", "simulator=cost_model", "~engine"]


@pytest.fixture
def own_queue(tmp_path, monkeypatch):
    """Queued runs of this test only (the queue lives in the cache dir)."""
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path / "pbcache"))
    return tmp_path / "pbcache" / "tracking_queue"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_costs_nothing_and_queues_the_run(run_cli, own_queue, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    start = time.perf_counter()
    run_cli([*SIM, f"tracking.uri={dead}", f"hydra.run.dir={tmp_path / 'run'}"])
    assert time.perf_counter() - start < 60  # no retry storm (it used to hang for minutes)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["sim_decode_tokens_per_s"] > 0
    [record] = queued(dead)
    assert record.status == "FINISHED" and record.uri == dead
    assert dict((k, v) for k, v, *_ in record.metrics)["sim_decode_tokens_per_s"] == \
        metrics["sim_decode_tokens_per_s"]
    assert record.params["model.name"] == "opt_13b"


def test_sync_to_a_server_that_is_down_names_it_and_fails(run_cli, own_queue, tmp_path):
    """Not "uploaded 0": the server is named unreachable, the exit status is not 0, and a
    queued run stays queued."""
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(SystemExit) as stopped:
        run_cli(["sync", f"tracking.uri={dead}"])  # nothing queued: still not a success
    message = str(stopped.value.code)
    assert f"the tracking server at {dead} is unreachable" in message
    assert "nothing uploaded, 0 run(s) still queued" in message
    run_cli([*SIM, f"tracking.uri={dead}"])  # server down: the run is queued
    with pytest.raises(SystemExit) as stopped:
        run_cli(["sync", f"tracking.uri={dead}"])
    assert "is unreachable" in str(stopped.value.code)
    assert "1 run(s) still queued" in str(stopped.value.code)
    assert len(queued(dead)) == 1


@pytest.mark.slow
def test_queued_runs_sync_to_the_server_once_it_is_back(run_cli, own_queue, tmp_path):
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    run_cli([*SIM, f"tracking.uri={uri}", "tracking.experiment=faults"])  # server down
    assert len(queued(uri)) == 1
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--backend-store-uri", f"sqlite:///{tmp_path / 'srv.db'}",
         "--default-artifact-root", str(tmp_path / "artifacts"), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=server_env())
    try:
        from powerbench.tracking.store import server_reachable

        deadline = time.time() + 60
        while not server_reachable(uri) and time.time() < deadline:
            time.sleep(0.5)
        assert server_reachable(uri), "mlflow server did not start"
        run_cli(["sync", f"tracking.uri={uri}"])
        run_cli(["sync", f"tracking.uri={uri}"])  # nothing left: no duplicate
        assert queued(uri) == []
        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(experiment_names=["faults"])
        assert len(runs) == 1 and runs.iloc[0]["status"] == "FINISHED"
        assert runs.iloc[0]["metrics.sim_decode_tokens_per_s"] > 0
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_rerun_of_a_sweep_skips_finished_jobs(run_cli, capsys):
    run_cli(["--multirun", *SIM, "bench.new_tokens=8,16", "tracking.experiment=resume"])
    capsys.readouterr()
    run_cli(["--multirun", *SIM, "bench.new_tokens=8,16,32", "tracking.experiment=resume"])
    out = capsys.readouterr().out
    assert "skipped 2 of 3 finished jobs" in out and out.count("skipped: job") == 2
    mlflow.set_tracking_uri(run_cli.store)
    runs = mlflow.search_runs(experiment_names=["resume"])
    children = runs[runs["tags.mlflow.parentRunId"].notna()]
    assert sorted(children["params.bench.new_tokens"].astype(int)) == [8, 16, 32]  # no repeats
    parents = runs[runs["tags.sweep"] == "true"].sort_values("start_time")
    assert list(parents["tags.sweep_status"]) == ["2 of 2 children finished",
                                                  "3 of 3 children finished"]
    run_cli(["--multirun", *SIM, "bench.new_tokens=8,16", "tracking.experiment=resume",
             "rerun=true"])
    assert "skipped" not in capsys.readouterr().out


def test_failed_job_runs_again(run_cli, capsys):
    # OPT-175B on an all-GPU placement fits nowhere: without the simulator that is an error
    bad = ["model=opt_175b", "hardware=pc_low", "solver=all_gpu", "~engine",
           "tracking.experiment=again"]
    for _ in range(2):
        with pytest.raises(SystemExit):  # Hydra reports the job's error and exits 1
            run_cli(bad)
        captured = capsys.readouterr()
        assert "PlacementInfeasible" in captured.err and "skipped" not in captured.out
    mlflow.set_tracking_uri(run_cli.store)
    runs = mlflow.search_runs(experiment_names=["again"])
    assert list(runs["status"]) == ["FAILED", "FAILED"]


def test_unwritable_store_fails_at_once_naming_the_path(run_cli, capsys, tmp_path):
    uri = "sqlite:////proc/powerbench-nope/mlflow.db"
    start = time.perf_counter()
    with pytest.raises(SystemExit):
        run_cli([*SIM, f"tracking.uri={uri}"])
    assert time.perf_counter() - start < 5
    assert "/proc/powerbench-nope" in capsys.readouterr().err
    with pytest.raises(TrackingStoreError, match="/proc/powerbench-nope.*cannot create"):
        Tracker(TrackingConfig(uri=uri)).reachable()


def test_interrupted_run_ends_killed_and_keeps_what_it_logged(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="killed"))
    with pytest.raises(KeyboardInterrupt), tracker.run("job"):
        tracker.log_metrics({"decode_ms": 1.0})  # kept
        raise KeyboardInterrupt
    run = mlflow.tracking.MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "KILLED" and run.data.metrics["decode_ms"] == 1.0


@pytest.mark.slow
def test_sigterm_from_a_scheduler_ends_the_run_killed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = (
        "import signal, time\n"
        "from powerbench.cli import _killed\n"
        "from powerbench.tracking import Tracker\n"
        "from powerbench.tracking.config import TrackingConfig\n"
        "signal.signal(signal.SIGTERM, _killed)\n"
        f"t = Tracker(TrackingConfig(uri={uri!r}, experiment='sigterm'))\n"
        "with t.run('job'):\n"
        "    print(t.run_id, flush=True)\n"
        "    time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    run_id = proc.stdout.readline().strip()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert mlflow.tracking.MlflowClient(uri).get_run(run_id).info.status == "KILLED"
