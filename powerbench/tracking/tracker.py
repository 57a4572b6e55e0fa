"""MLflow tracking: one run per experiment job, children of a sweep's parent run."""

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
from powerbench.tracking.provenance import machine_tags
from powerbench.tracking.store import default_artifact_root, resolve_uri

log = logging.getLogger(__name__)

MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
MAX_PARAM_VALUE = 6000  # MLflow 3 param value length limit
PARENT_RUN_ENV = "POWERBENCH_PARENT_RUN_ID"


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


def ensure_experiment(client: Any, name: str, uri: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    artifact_root = default_artifact_root() if uri.startswith("sqlite:") else None
    return client.create_experiment(name, artifact_location=artifact_root and
                                    f"{artifact_root}/{name}")


class Tracker:
    """Thin wrapper over an MLflow client bound to one store and experiment."""

    def __init__(self, cfg: TrackingConfig | None = None) -> None:
        cfg = cfg if cfg is not None else TrackingConfig()
        self.uri = resolve_uri(cfg.uri)
        self.experiment = cfg.experiment
        self.enabled = cfg.enabled
        self.run_id: str | None = None
        self._client = None

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def experiment_id(self) -> str:
        return ensure_experiment(self.client, self.experiment, self.uri)

    @contextmanager
    def run(self, run_name: str, parent_run_id: str | None = None,
            tags: Mapping[str, str] | None = None) -> Iterator[Tracker]:
        """Start a run (child of `parent_run_id` or $POWERBENCH_PARENT_RUN_ID); finish it
        FAILED if the body raises, after everything logged so far is stored."""
        if not self.enabled:
            yield self
            return
        parent_run_id = parent_run_id or os.environ.get(PARENT_RUN_ENV)
        all_tags = dict(machine_tags(), **(tags or {}))
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id(), run_name=run_name, tags=all_tags)
        self.run_id = run.info.run_id
        try:
            yield self
        except BaseException:
            self.client.set_terminated(self.run_id, "FAILED")
            raise
        else:
            self.client.set_terminated(self.run_id, "FINISHED")

    # ---- logging ------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        if not (self.enabled and self.run_id):
            return
        from mlflow.entities import Param

        flat = flatten(params)
        for batch in chunks(sorted(flat.items()), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in batch])

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        if not (self.enabled and self.run_id):
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()
                 if v is not None and math.isfinite(float(v))]
        for batch in chunks(items, 1000):
            self.client.log_batch(self.run_id, metrics=batch)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if not (self.enabled and self.run_id):
            return
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self.enabled and self.run_id:
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        if self.enabled and self.run_id:
            self.client.log_text(self.run_id, text, artifact_file)
