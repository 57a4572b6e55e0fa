"""Hydra callback: a multirun becomes one MLflow parent run with one child per job.

The parent is created before the first job (queued on disk if the server is down; its
children then point at it by queue id) and ends with tags saying how many children
finished, were skipped (finished in an earlier run of the same sweep) or failed. A sweep
interrupted by Ctrl-C or SIGTERM ends its parent KILLED (`end_interrupted_sweep`, called
by powerbench.cli). Each job start logs the sweep's progress with the time left.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from powerbench.progress import Progress
from powerbench.tracking.naming import SWEPT_ENV, publish_swept_keys, sweep_overrides, swept_keys
from powerbench.tracking.queue import QUEUE_TAG, RunRecord
from powerbench.tracking.tracker import PARENT_QUEUE_ENV, PARENT_RUN_ENV, Tracker

log = logging.getLogger(__name__)

SWEEP_JOBS_ENV = "POWERBENCH_SWEEP_JOBS"  # jobs in this sweep (for the progress line)
SWEEP_START_ENV = "POWERBENCH_SWEEP_START"  # its start, time.time()
_active: MlflowSweepCallback | None = None  # the sweep running in this process


def sweep_size(overrides: list[str], sweeper_params: dict[str, str] | None) -> int | None:
    """Jobs of a grid sweep: the product of each key's number of values (the overrides each
    key ends with: `sweep_overrides`). None for an interval or custom sweep."""
    try:
        return math.prod(
            len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
            for o in sweep_overrides(overrides, sweeper_params).values())
    except Exception:  # noqa: BLE001 - an interval or custom sweep: no count
        return None


def end_interrupted_sweep(status: str = "KILLED") -> None:
    """End this process's sweep parent run with `status` (Ctrl-C / SIGTERM mid-sweep)."""
    if _active is not None:
        _active.finish(status, {"sweep_status": f"interrupted ({status})"})


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
        global _active
        overrides = list(config.hydra.overrides.task)
        params = dict(config.hydra.sweeper.get("params") or {})
        publish_swept_keys(swept_keys(overrides, params))  # run names carry swept values
        total = sweep_size(overrides, params)
        if total:
            os.environ[SWEEP_JOBS_ENV] = str(total)
        os.environ[SWEEP_START_ENV] = str(time.time())
        tracker = _tracker(config)
        if not tracker.enabled:
            return
        _active = self
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

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """In a sweep: `sweep: k/N (..%), elapsed, ~left` before each job."""
        from hydra.core.hydra_config import HydraConfig

        from powerbench.tracking.jobs import sweep_counts

        total = os.environ.get(SWEEP_JOBS_ENV)
        start = os.environ.get(SWEEP_START_ENV)
        try:
            sweep_dir = HydraConfig.get().sweep.dir
        except ValueError:
            return
        if not (total and start and sweep_dir):
            return
        progress = Progress("sweep", int(total), first_s=0, every_s=0, clock=time.time,
                            started=float(start))
        progress.update(sweep_counts(sweep_dir)["total"])

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _active
        from powerbench.tracking.jobs import sweep_counts

        _active = None
        counts = sweep_counts(config.hydra.sweep.dir)
        if counts["skipped"]:
            print(f"skipped {counts['skipped']} of {counts['total']} finished jobs "
                  "(rerun=true or --force runs them again)")
        for env in (PARENT_RUN_ENV, PARENT_QUEUE_ENV, SWEEP_JOBS_ENV, SWEEP_START_ENV,
                    SWEPT_ENV):
            os.environ.pop(env, None)
        if self.tracker is None or self.record is None:
            return
        done = counts["finished"] + counts["skipped"]
        status = "FINISHED" if done == counts["total"] else "FAILED"
        tags = {f"children_{k}": str(v) for k, v in counts.items()}
        tags["sweep_status"] = f"{done} of {counts['total']} children finished"
        self.finish(status, tags)

    def finish(self, status: str, tags: dict[str, str]) -> None:
        """End the parent run with `status` and `tags` (queued when the server is down)."""
        if self.tracker is None or self.record is None:
            return
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
