"""Hydra callback: a multirun becomes one MLflow parent run with one child per job."""

from __future__ import annotations

import logging
import os
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from powerbench.tracking.tracker import PARENT_RUN_ENV, Tracker

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
        self.parent_run_id: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        tracker = _tracker(config)
        if not tracker.enabled:
            return
        from powerbench.tracking.provenance import machine_tags

        overrides = " ".join(config.hydra.overrides.task)
        tags = dict(machine_tags(), sweep="true", sweep_overrides=overrides)
        run = tracker.client.create_run(tracker.experiment_id(),
                                        run_name=f"sweep:{config.get('name', 'powerbench')}",
                                        tags=tags)
        self.tracker, self.parent_run_id = tracker, run.info.run_id
        os.environ[PARENT_RUN_ENV] = self.parent_run_id
        log.info("MLflow parent run %s for this sweep", self.parent_run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.tracker and self.parent_run_id:
            self.tracker.client.set_terminated(self.parent_run_id, "FINISHED")
            os.environ.pop(PARENT_RUN_ENV, None)
