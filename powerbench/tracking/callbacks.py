"""Hydra callback: a multirun becomes one MLflow parent run with one child per job.

The parent is created before the first job (queued on disk if the server is down; its
children then point at it by queue id) and ends with tags saying how many children
finished, were skipped (finished in an earlier run of the same sweep) or failed.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from powerbench.tracking.queue import QUEUE_TAG, RunRecord
from powerbench.tracking.tracker import PARENT_QUEUE_ENV, PARENT_RUN_ENV, Tracker

log = logging.getLogger(__name__)


def _tracker(config: DictConfig) -> Tracker:
    from powerbench.build import build
    from powerbench.config import typed

    return build(typed(config.tracking))


class MlflowSweepCallback(Callback):
    """Creates the parent run before the first job; jobs (same process, or launcher
    workers started afterwards) read its id from the environment."""

    def __init__(self) -> None:
        self.tracker: Tracker | None = None
        self.record: RunRecord | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        tracker = _tracker(config)
        if not tracker.enabled:
            return
        from powerbench.tracking.provenance import machine_tags

        overrides = " ".join(config.hydra.overrides.task)
        tags = dict(machine_tags(), sweep="true", sweep_overrides=overrides)
        self.tracker = tracker
        self.record = RunRecord(uri=tracker.uri, experiment=tracker.experiment,
                                run_name=f"sweep:{config.get('name', 'powerbench')}", tags=tags)
        os.environ[PARENT_QUEUE_ENV] = self.record.queue_id
        if tracker.reachable():
            run = tracker.client.create_run(tracker.experiment_id(),
                                            run_name=self.record.run_name,
                                            tags=dict(tags, **{QUEUE_TAG: self.record.queue_id}))
            self.record.server_run_id = run.info.run_id
            os.environ[PARENT_RUN_ENV] = run.info.run_id
            log.info("MLflow parent run %s for this sweep", run.info.run_id)
        else:
            self.record.save()
            log.warning("tracking server %s unreachable: the sweep's runs are queued in %s; "
                        "`powerbench sync` uploads them", tracker.uri, self.record.path.parent)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from powerbench.tracking.jobs import sweep_counts

        counts = sweep_counts(config.hydra.sweep.dir)
        if counts["skipped"]:
            print(f"skipped {counts['skipped']} of {counts['total']} finished jobs "
                  "(rerun=true or --force runs them again)")
        os.environ.pop(PARENT_RUN_ENV, None)
        os.environ.pop(PARENT_QUEUE_ENV, None)
        if self.tracker is None or self.record is None:
            return
        done = counts["finished"] + counts["skipped"]
        status = "FINISHED" if done == counts["total"] else "FAILED"
        tags = {f"children_{k}": str(v) for k, v in counts.items()}
        tags["sweep_status"] = f"{done} of {counts['total']} children finished"
        self.record.tags.update(tags)
        self.record.status = status
        run_id = self.record.server_run_id
        try:
            if run_id is None:
                raise ConnectionError("parent run is queued")
            for key, value in tags.items():
                self.tracker.client.set_tag(run_id, key, value)
            self.tracker.client.set_terminated(run_id, status)
            self.record.discard()
        except Exception as err:  # noqa: BLE001 - server down at the end: queue the parent
            log.warning("sweep parent run queued (%s)", err)
            self.record.save()
