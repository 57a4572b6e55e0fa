"""`powerbench ui [URI]`: the command that opens MLflow's dashboard on the tracking store,
and the direct link to the experiment's runs."""

from __future__ import annotations

import logging
from pathlib import Path

from powerbench.build import build
from powerbench.config import PowerbenchConfig
from powerbench.tasks.config import UiTask
from powerbench.tracking import resolve_uri, ui_command

log = logging.getLogger(__name__)


def ui(task: UiTask, cfg: PowerbenchConfig, out_dir: Path) -> str:
    uri = resolve_uri(cfg.tracking.uri)
    command = ui_command(uri)
    tracker = build(cfg.tracking)
    try:
        tracker.offline = not tracker.reachable()
    except Exception as err:  # noqa: BLE001 - the command is still worth printing
        log.warning("tracking store %s cannot be read: %s", uri, err)
        tracker.offline = True
    link = tracker.runs_link()
    print(command)
    print(f"then open the runs of experiment '{tracker.experiment}': {link}")
    return command
