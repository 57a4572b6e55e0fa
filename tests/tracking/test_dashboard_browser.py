"""The MLflow dashboard in a real (headless) browser: an experiment powerbench created
opens on its runs, not on MLflow 3's GenAI overview of traces (issue 28). Skipped where no
Chromium is installed (`apt-get install chromium`)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig
from powerbench.tracking.store import runs_link, server_reachable
from powerbench.tracking.tracker import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                               "google-chrome")) if p), None)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendered(url: str) -> str:
    """The page's DOM after its scripts ran (headless Chromium)."""
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=30000", "--dump-dom", url],
        capture_output=True, text=True, timeout=180).stdout


@pytest.fixture
def dashboard(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--backend-store-uri", uri, "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while not server_reachable(url, timeout_s=1) and time.time() < deadline:
            time.sleep(0.5)
        assert server_reachable(url), "mlflow server did not start"
        yield uri, url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_each_experiment_opens_on_its_runs_in_a_browser(dashboard):
    """The link powerbench prints (`powerbench ui`, after a run) shows the runs table; the
    bare experiment page, MLflow 3's default GenAI view, shows an empty traces overview."""
    uri, url = dashboard
    tracker = Tracker(TrackingConfig(uri=uri, experiment="dash"))
    with tracker.run("powerbench-visible-run"):
        tracker.log_metrics({"sim_decode_tokens_per_s": 12.0})
    experiment_id = tracker.experiment_id()
    client = mlflow.tracking.MlflowClient(uri)
    assert client.get_experiment(experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    page = rendered(runs_link(url, experiment_id))
    assert "powerbench-visible-run" in page and "Model training" in page
    # the fault it fixes: the experiment page in the default (GenAI) view lists no run
    bare = rendered(f"{url}/#/experiments/{experiment_id}")
    assert "powerbench-visible-run" not in bare and "No data" in bare
