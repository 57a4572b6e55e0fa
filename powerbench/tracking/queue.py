"""Runs kept on local disk while the tracking server is unreachable, uploaded by `sync`.

A `RunRecord` holds everything one run logged (params, metrics, tags, artifact files,
final status). The tracker keeps one for every run; when the server cannot be reached at
the start, or a call to it fails mid-run, the record is saved under
`<cache>/tracking_queue/<queue_id>.json` (artifacts copied beside it) and the job goes on.
`sync_queue(uri)` uploads the records of that store: each run carries the tag
`powerbench.queue_id`, so a run the server already has (finished, or created before the
server went down) is completed or skipped, never duplicated.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from powerbench.paths import cache_dir

log = logging.getLogger(__name__)

QUEUE_TAG = "powerbench.queue_id"
TERMINAL = ("FINISHED", "FAILED", "KILLED")


def queue_dir() -> Path:
    path = cache_dir() / "tracking_queue"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class RunRecord:
    uri: str
    experiment: str
    run_name: str
    queue_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)  # key, v, ms, step
    artifacts: list[tuple[str, str | None]] = field(default_factory=list)  # file, subdir
    texts: list[tuple[str, str]] = field(default_factory=list)  # text, artifact file
    status: str = "RUNNING"
    parent_queue_id: str | None = None
    parent_run_id: str | None = None
    server_run_id: str | None = None  # created on the server before it went away
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def path(self) -> Path:
        return queue_dir() / f"{self.queue_id}.json"

    def save(self) -> Path:
        """Write the record (artifacts copied next to it, so nothing depends on out_dir)."""
        files = queue_dir() / self.queue_id
        kept = []
        for src, subdir in self.artifacts:
            source = Path(src)
            if source.is_file() and files not in source.parents:
                files.mkdir(parents=True, exist_ok=True)
                dest = files / f"{len(kept)}_{source.name}"
                shutil.copy2(source, dest)
                source = dest
            kept.append((str(source), subdir))
        self.artifacts = kept
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(self.path)
        return self.path

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        data = json.loads(path.read_text())
        data["metrics"] = [tuple(m) for m in data["metrics"]]
        data["artifacts"] = [tuple(a) for a in data["artifacts"]]
        data["texts"] = [tuple(t) for t in data["texts"]]
        return cls(**data)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
        shutil.rmtree(queue_dir() / self.queue_id, ignore_errors=True)


def queued(uri: str | None = None) -> list[RunRecord]:
    """Saved records (of one store when `uri` is given), parents before children."""
    records = []
    for path in sorted(queue_dir().glob("*.json")):
        try:
            record = RunRecord.load(path)
        except (OSError, ValueError, TypeError, KeyError) as err:
            log.warning("unreadable queued run %s (%s): left in place", path, err)
            continue
        if uri is None or record.uri == uri:
            records.append(record)
    return sorted(records, key=lambda r: (r.parent_queue_id is not None, r.created_ms))


@dataclass
class SyncReport:
    uploaded: int = 0
    completed: int = 0  # runs the server had started before it went away
    already: int = 0  # runs the server already had in full
    left: int = 0  # still queued (server unreachable or an upload failed)
    unreachable: bool = False  # the server did not answer the probe: nothing was tried


def upload(client: Any, record: RunRecord, experiment_id: str, parents: dict[str, str],
           run_id: str | None = None) -> str:
    """Create the record's run on the server, or finish `run_id` (the run it already has
    for this record); returns its server run id."""
    from mlflow.entities import Metric, Param

    if run_id is None:
        tags = dict(record.tags, **{QUEUE_TAG: record.queue_id})
        parent = record.parent_run_id or parents.get(record.parent_queue_id or "")
        if parent:
            tags["mlflow.parentRunId"] = parent
        run_id = client.create_run(experiment_id, start_time=record.created_ms,
                                   run_name=record.run_name, tags=tags).info.run_id
    existing = client.get_run(run_id).data.params
    params = [Param(k, v) for k, v in record.params.items() if k not in existing]
    for start in range(0, len(params), 100):
        client.log_batch(run_id, params=params[start:start + 100])
    metrics = [Metric(k, v, ms, step) for k, v, ms, step in record.metrics]
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start:start + 1000])
    for key, value in record.tags.items():
        client.set_tag(run_id, key, value)
    for path, subdir in record.artifacts:
        if Path(path).exists():
            client.log_artifact(run_id, path, subdir)
    for text, name in record.texts:
        client.log_text(run_id, text, name)
    if record.status in TERMINAL:
        client.set_terminated(run_id, record.status)
    return run_id


def sync_queue(uri: str, probe: bool = True) -> SyncReport:
    """Upload every queued run of the store at `uri`; records that uploaded are removed.
    A server that does not answer one probe: `unreachable`, every record left queued
    (probed even with none queued: a sync to it has not happened). `probe=False`: the
    caller has just found the server reachable."""
    from mlflow.tracking import MlflowClient

    from powerbench.tracking.store import create_if_new, is_remote, server_reachable

    records = queued(uri)
    if probe and is_remote(uri) and not server_reachable(uri):
        return SyncReport(left=len(records), unreachable=True)
    report = SyncReport()
    if not records:
        return report
    create_if_new(uri)
    client = MlflowClient(tracking_uri=uri)
    parents: dict[str, str] = {}
    from powerbench.tracking.tracker import ensure_experiment

    for record in records:
        try:
            experiment_id = ensure_experiment(client, record.experiment, uri)
            found = client.search_runs([experiment_id],
                                       f"tags.`{QUEUE_TAG}` = '{record.queue_id}'")
            done = found and found[0].info.status == record.status and \
                record.status in TERMINAL
            if done:
                parents[record.queue_id] = found[0].info.run_id
                report.already += 1
            else:
                parents[record.queue_id] = upload(
                    client, record, experiment_id, parents,
                    run_id=found[0].info.run_id if found else None)
                if found or record.server_run_id:
                    report.completed += 1
                else:
                    report.uploaded += 1
        except Exception as err:  # noqa: BLE001 - the server went away again: keep it queued
            log.warning("queued run %s not uploaded (%s); kept for the next sync",
                        record.queue_id, err)
            report.left += 1
            continue
        if record.status in TERMINAL:
            record.discard()
    return report
