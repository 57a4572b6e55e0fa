"""`powerbench sync`: upload runs queued while the tracking server was down (no duplicates)."""

from __future__ import annotations

from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.tasks.config import SyncTask
from powerbench.tracking import resolve_uri
from powerbench.tracking.queue import SyncReport, queue_dir, sync_queue
from powerbench.tracking.store import PROBE_TIMEOUT_S


def sync(task: SyncTask, cfg: PowerbenchConfig, out_dir: Path) -> SyncReport:
    uri = resolve_uri(cfg.tracking.uri)
    report = sync_queue(uri)
    if report.unreachable:
        raise SystemExit(f"the tracking server at {uri} is unreachable (no answer within "
                         f"{PROBE_TIMEOUT_S:g} s): nothing uploaded, {report.left} run(s) "
                         f"still queued in {queue_dir()}; start it (make mlflow-server) or "
                         "check tracking.uri")
    print(f"{uri}: uploaded {report.uploaded}, completed {report.completed} started before "
          f"the server went away, {report.already} already there, {report.left} still queued "
          f"in {queue_dir()}")
    if report.left:
        raise SystemExit(f"{report.left} run(s) not uploaded: is the server at {uri} up?")
    return report
