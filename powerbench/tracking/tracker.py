"""MLflow tracking: one run per job, children of a sweep's parent run; never costs a result.

A local store that cannot be written fails at once, naming the path. A tracking server
that does not answer one probe (<= 3 s, no retries) puts the tracker OFFLINE: the job
computes anyway and its run is queued on disk (powerbench.tracking.queue); a server call
that fails mid-run does the same. `powerbench sync`, or the next run against that store,
uploads queued runs without duplicates.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from powerbench.tracking.config import TrackingConfig
from powerbench.tracking.metrics import UnknownMetricError, unknown_metrics
from powerbench.tracking.metrics import strict as strict_metrics
from powerbench.tracking.provenance import machine_tags
from powerbench.tracking.queue import QUEUE_TAG, RunRecord, sync_queue
from powerbench.tracking.store import (
    artifact_root,
    check_writable,
    create_if_new,
    is_remote,
    resolve_uri,
    runs_link,
    server_reachable,
)

log = logging.getLogger(__name__)

MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
MAX_PARAM_VALUE = 6000  # MLflow 3 param value length limit
PARENT_RUN_ENV = "POWERBENCH_PARENT_RUN_ID"
PARENT_QUEUE_ENV = "POWERBENCH_PARENT_QUEUE_ID"  # a sweep whose parent run is queued
FAILURE_TAG = "failure"  # why a FAILED run failed: "<ErrorType>: <message>"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"}; lists are kept as their JSON text."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, prefix=f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            flat[name] = text[:MAX_PARAM_VALUE]
    return flat


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# MLflow 3's dashboard opens an experiment on the page its kind names; without this tag it
# infers GenAI development and opens on an empty "Overview" of traces instead of the runs.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def ensure_experiment(client: Any, name: str, uri: str) -> str:
    """The id of experiment `name`, created as a model-training experiment (so the
    dashboard opens on its runs) with its artifacts beside a SQLite store's database."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        root = artifact_root(uri)
        experiment_id = client.create_experiment(
            name, artifact_location=root and f"{root}/{name}",
            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        return experiment_id
    if experiment.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:  # made by older code
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG,
                                  EXPERIMENT_KIND)
    return experiment.experiment_id


_warned: set[str] = set()


def check_metric_names(metrics: Mapping[str, Any]) -> None:
    """Every name must be in the metric registry (docs/metrics.md is generated from it)."""
    unknown = [n for n in unknown_metrics(list(metrics)) if n not in _warned]
    if not unknown:
        return
    message = (f"metric(s) {unknown} are not declared in powerbench/tracking/metrics.py; add "
               "them there (and run `powerbench docs`)")
    if strict_metrics():
        raise UnknownMetricError(message)
    _warned.update(unknown)
    log.warning(message)


class JobKilled(BaseException):
    """Raised in a job by SIGTERM (powerbench.cli installs the handler): its run ends KILLED."""


class Tracker:
    """One MLflow store and experiment; runs logged online, or queued when it is down."""

    def __init__(self, cfg: TrackingConfig | None = None) -> None:
        cfg = cfg if cfg is not None else TrackingConfig()
        self.uri = resolve_uri(cfg.uri)
        self.experiment = cfg.experiment
        self.enabled = cfg.enabled
        self.run_id: str | None = None
        self.record: RunRecord | None = None
        self.offline = False
        self._client = None
        if self.enabled and is_remote(self.uri):
            # fail fast on a dead server: one try, a short timeout (default: 7 retries)
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            create_if_new(self.uri)
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def experiment_id(self) -> str:
        return ensure_experiment(self.client, self.experiment, self.uri)

    def runs_link(self) -> str:
        """The dashboard link to this experiment's runs (without the id when the store
        cannot be asked now: never fails)."""
        try:
            experiment_id = None if self.offline else self.experiment_id()
        except Exception:  # noqa: BLE001 - a link is not worth a failed job
            experiment_id = None
        return runs_link(self.uri, experiment_id)

    def reachable(self) -> bool:
        """The store can take runs now (local stores: writable, else TrackingStoreError)."""
        if not is_remote(self.uri):
            check_writable(self.uri)
            return True
        return server_reachable(self.uri)

    @contextmanager
    def run(self, run_name: str, parent_run_id: str | None = None,
            tags: Mapping[str, str] | None = None) -> Iterator[Tracker]:
        """Start a run (child of `parent_run_id` or $POWERBENCH_PARENT_RUN_ID); it ends
        FINISHED, FAILED if the body raises, KILLED if interrupted, after everything logged
        so far is stored (on the server, or queued on disk when it is unreachable)."""
        if not self.enabled:
            yield self
            return
        parent_run_id = parent_run_id or os.environ.get(PARENT_RUN_ENV)
        all_tags = dict(machine_tags(), **(tags or {}))
        self.record = RunRecord(uri=self.uri, experiment=self.experiment, run_name=run_name,
                                parent_run_id=parent_run_id,
                                parent_queue_id=os.environ.get(PARENT_QUEUE_ENV))
        self.record.tags.update({k: str(v) for k, v in all_tags.items()})
        self.offline = not self.reachable()
        if self.offline:
            log.warning("tracking server %s unreachable: this run is queued in %s; "
                        "`powerbench sync` uploads it when the server is back",
                        self.uri, self.record.path)
        else:
            self._sync_queue()
            self._online(lambda: self._create(run_name, parent_run_id, all_tags))
        status = "FAILED"
        try:
            yield self
            status = "FINISHED"
        except (JobKilled, KeyboardInterrupt):  # Ctrl-C, or SIGTERM from a scheduler
            status = "KILLED"
            raise
        except Exception as err:  # the reason a run FAILED is on the run, not only in a log
            self.set_tags({FAILURE_TAG: f"{type(err).__name__}: {err}"[:MAX_PARAM_VALUE]})
            raise
        finally:
            self.record.status = status
            if not self.offline:
                self._online(lambda: self.client.set_terminated(self.run_id, status))
            if self.offline:
                self.record.save()

    def _create(self, run_name: str, parent_run_id: str | None,
                tags: Mapping[str, str]) -> None:
        tags = dict(tags, **{QUEUE_TAG: self.record.queue_id})
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id(), run_name=run_name, tags=tags)
        self.run_id = self.record.server_run_id = run.info.run_id

    def _online(self, call) -> None:
        """Make a server call; if it fails, go offline (the record keeps everything)."""
        if self.offline:
            return
        try:
            call()
        except Exception as err:  # noqa: BLE001 - any server failure: keep the result locally
            self.offline = True
            what = "tracking server" if is_remote(self.uri) else "local tracking store"
            log.warning("%s %s failed (%s): the rest of this run is queued in %s; `powerbench "
                        "sync` uploads it once the store works again", what, self.uri, err,
                        self.record.path)

    def _sync_queue(self) -> None:
        try:
            report = sync_queue(self.uri, probe=False)  # run() has just probed it
        except Exception as err:  # noqa: BLE001 - syncing old runs never stops a new one
            log.warning("could not upload queued runs to %s: %s", self.uri, err)
            return
        if report.uploaded or report.completed:
            log.info("uploaded %d queued run(s) to %s", report.uploaded + report.completed,
                     self.uri)

    # ---- logging ------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        if not (self.enabled and self.record):
            return
        from mlflow.entities import Param

        flat = flatten(params)
        self.record.params.update(flat)

        def send() -> None:
            for batch in chunks(sorted(flat.items()), MAX_PARAMS_PER_BATCH):
                self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in batch])

        self._online(send)

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log metrics declared in powerbench.tracking.metrics (an unknown name: a warning,
        UnknownMetricError with $POWERBENCH_STRICT_METRICS=1); non-finite values are
        skipped (MLflow cannot hold them; a NaN that matters fails the run instead)."""
        check_metric_names(metrics)
        if not (self.enabled and self.record):
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()
                 if v is not None and math.isfinite(float(v))]
        self.record.metrics += [(m.key, m.value, m.timestamp, m.step) for m in items]

        def send() -> None:
            for batch in chunks(items, 1000):
                self.client.log_batch(self.run_id, metrics=batch)

        self._online(send)

    @property
    def run_name(self) -> str | None:
        return self.record.run_name if self.record else None

    def rename(self, run_name: str) -> None:
        """Rename the current run (e.g. after what actually ran)."""
        if not (self.enabled and self.record):
            return
        self.record.run_name = run_name
        self._online(lambda: self.client.set_tag(self.run_id, "mlflow.runName", run_name))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if not (self.enabled and self.record):
            return
        values = {k: str(v) for k, v in tags.items()}
        self.record.tags.update(values)
        self._online(lambda: [self.client.set_tag(self.run_id, k, v) for k, v in values.items()])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self.enabled and self.record:
            self.record.artifacts.append((str(path), artifact_path))
            self._online(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path))

    def log_text(self, text: str, artifact_file: str) -> None:
        if self.enabled and self.record:
            self.record.texts.append((text, artifact_file))
            self._online(lambda: self.client.log_text(self.run_id, text, artifact_file))
