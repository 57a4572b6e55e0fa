"""`powerbench mlflow-server`: PostgreSQL + `mlflow server`, until interrupted."""

from __future__ import annotations

import time
from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.paths import cache_dir
from powerbench.tasks.config import MlflowServerTask
from powerbench.tracking.server import TrackingServer


def mlflow_server(task: MlflowServerTask, cfg: PowerbenchConfig, out_dir: Path) -> None:
    data = Path(task.data_dir) if task.data_dir else cache_dir(cfg.cache_dir) / "mlflow-server"
    server = TrackingServer(data, port=task.port, pg_port=task.pg_port, host=task.host).start()
    print(f"MLflow server {server.uri} (backend {server.backend_uri}, data in {data}).\n"
          f"Log to it with: powerbench tracking.uri={server.uri} ...\n"
          f"Upload runs queued while it was down: powerbench sync tracking.uri={server.uri}\n"
          "Ctrl-C stops it.")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
