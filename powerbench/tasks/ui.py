"""`powerbench ui`: the command that opens MLflow's dashboard on the configured store."""

from __future__ import annotations

from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.tasks.config import UiTask
from powerbench.tracking import resolve_uri, ui_command


def ui(task: UiTask, cfg: PowerbenchConfig, out_dir: Path) -> str:
    command = ui_command(resolve_uri(cfg.tracking.uri))
    print(command)
    return command
