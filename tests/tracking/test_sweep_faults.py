"""Faults of sweeps (issue 28): Ctrl-C / SIGTERM end the sweep's parent run KILLED (SIGTERM
exits 143); run names carry the swept values and no tracking backend; figures are drawn
from the runs just computed when the tracking server is down; sweeps report progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import mlflow
import pytest

from powerbench.tracking.queue import queued

SIM = ["model=opt_13b", "hardware=pc_low", "solver=greedy", "simulator=cost_model", "~engine"]

# a sweep whose first job hangs in its pipeline (so the signal lands mid-job); Ctrl-C
# acts as in a terminal even when this test runs in the background (a shell starts
# background jobs with SIGINT ignored, and Python keeps an ignored SIGINT ignored)
HANGING_SWEEP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "import powerbench.pipeline as pipeline\n"
    "def hang(ctx):\n"
    "    print('JOB STARTED', flush=True)\n"
    "    time.sleep(120)\n"
    "pipeline.run_stages = hang\n"
    "from powerbench.cli import main\n"
    "main(sys.argv[1:])\n")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["sigterm", "sigint"])
def test_signal_during_a_multirun_ends_the_parent_killed(tmp_path, sig, code):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGING_SWEEP, "--multirun", *SIM, "bench.new_tokens=8,16",
         f"tracking.uri={store}", "tracking.experiment=signal", f"cache_dir={tmp_path / 'c'}",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    for line in proc.stdout:  # wait until the first job is inside its run
        if "JOB STARTED" in line:
            break
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == code, out
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=["signal"])
    parent = runs[runs["tags.sweep"] == "true"].iloc[0]
    child = runs[runs["tags.mlflow.parentRunId"].notna()].iloc[0]
    assert parent["status"] == "KILLED" and child["status"] == "KILLED"
    assert len(runs) == 2  # the second job never started


def test_run_names_carry_the_swept_values_and_no_tracking_backend(run_cli, capfd):
    run_cli(["--multirun", *SIM, "bench.new_tokens=8,16", "tracking.experiment=names"])
    mlflow.set_tracking_uri(run_cli.store)
    runs = mlflow.search_runs(experiment_names=["names"])
    names = sorted(runs[runs["tags.mlflow.parentRunId"].notna()]["tags.mlflow.runName"])
    assert [n.rsplit("-", 1)[1] for n in names] == ["new_tokens=16", "new_tokens=8"]
    assert all("sqlite" not in n and "opt_13b" in n and not n.startswith("run-")
               for n in names)
    out = "".join(capfd.readouterr())  # Hydra's job logging: the progress, with an estimate
    assert "sweep: 1/2 (50%)" in out and "left" in out


def test_reproduce_draws_its_figures_from_the_runs_it_just_computed_when_the_server_is_down(
        run_cli, tmp_path, monkeypatch):
    from powerbench.figures.runs import search_runs
    from powerbench.tracking.store import server_reachable

    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path / "pbcache"))  # this test's queue
    dead = "http://127.0.0.1:9"  # discard port: nothing answers
    assert not server_reachable(dead)
    run_cli(["--multirun", *SIM, "bench.new_tokens=8,16", f"tracking.uri={dead}",
             "tracking.experiment=down"])
    assert len(queued(dead)) == 3  # parent + two jobs, kept on disk
    start = time.perf_counter()
    runs = search_runs("down", dead)
    assert time.perf_counter() - start < 10  # one probe, no minutes of MLflow retries
    assert "sweep:default" in set(runs["tags.mlflow.runName"])  # the parent, as MLflow has it
    runs = runs[runs["params.bench.new_tokens"].notna()]
    assert sorted(runs["params.bench.new_tokens"].astype(int)) == [8, 16]
    assert (runs["metrics.sim_decode_tokens_per_s"] > 0).all()
    assert set(runs["status"]) == {"FINISHED"}


@pytest.mark.slow
def test_engine_fallback_names_and_tags_the_backend_that_ran(run_cli, tiny_overrides, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("sparse_cuda runs here: no fallback to check")
    run_cli([*tiny_overrides, "engine=sparse_cuda", "predictor=oracle",
             "profiling.max_tokens=1024", "profiling.samples_per_layer=256",
             "bench.prompt_tokens=16", "bench.new_tokens=4", "bench.repeats=1",
             "bench.warmup=0", "eval.max_tokens=256", "eval.mc_items=4",
             "tracking.experiment=fallback"])
    mlflow.set_tracking_uri(run_cli.store)
    run = mlflow.search_runs(experiment_names=["fallback"]).iloc[0]
    assert run["tags.engine_backend"] == "sparse_cpu"
    assert run["tags.engine_fallback"] == "sparse_cuda->sparse_cpu"
    assert "sparse_cpu" in run["tags.mlflow.runName"]
    assert "sparse_cuda" not in run["tags.mlflow.runName"]
