"""Where runs are stored, and the command that opens the dashboard on that store."""

from __future__ import annotations

import shlex
from pathlib import Path

from powerbench.paths import cache_dir


def default_tracking_uri() -> str:
    """The embedded store: SQLite (MLflow 3 refuses a bare file store by default)."""
    return f"sqlite:///{cache_dir() / 'mlflow.db'}"


def default_artifact_root() -> str:
    return (cache_dir() / "mlartifacts").as_uri()


def resolve_uri(uri: str | None) -> str:
    return uri or default_tracking_uri()


def ui_command(uri: str) -> str:
    """The exact command that opens the MLflow dashboard on `uri`."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    parts = ["mlflow", "ui", "--backend-store-uri", uri]
    if uri == default_tracking_uri():
        parts += ["--default-artifact-root", default_artifact_root()]
    venv_mlflow = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "mlflow"
    if venv_mlflow.exists():
        parts[0] = str(venv_mlflow.relative_to(Path.cwd())) if venv_mlflow.is_relative_to(
            Path.cwd()) else str(venv_mlflow)
    return shlex.join(parts)
