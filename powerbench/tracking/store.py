"""Where runs are stored, and the command that opens the dashboard on that store."""

from __future__ import annotations

import shlex
from pathlib import Path

from powerbench.paths import cache_dir


def default_tracking_uri() -> str:
    """The embedded store: SQLite (MLflow 3 refuses a bare file store by default)."""
    return f"sqlite:///{cache_dir() / 'mlflow.db'}"


def resolve_uri(uri: str | None) -> str:
    return uri or default_tracking_uri()


def ui_command(uri: str) -> str:
    """The exact command that opens the MLflow dashboard on `uri`."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    parts = ["mlflow", "ui", "--backend-store-uri", uri]
    root = artifact_root(uri)
    if root is not None:
        parts += ["--default-artifact-root", root]
    venv_mlflow = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "mlflow"
    if venv_mlflow.exists():
        parts[0] = str(venv_mlflow.relative_to(Path.cwd())) if venv_mlflow.is_relative_to(
            Path.cwd()) else str(venv_mlflow)
    return shlex.join(parts)


UI_URL = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


# MLflow 3's dashboard shows "GenAI" pages (traces) unless told the workflow is model
# training: by this URL parameter (its own switch, kept in the browser, defaults to GenAI)
ML_WORKFLOW = "workflowType=machine_learning"


def runs_link(uri: str, experiment_id: str | None) -> str:
    """The dashboard page listing the runs of an experiment, in MLflow's model-training
    view (the server's own address for a tracking server; `mlflow ui`'s default address
    for a local store)."""
    base = uri.rstrip("/") if is_remote(uri) else UI_URL
    page = f"experiments/{experiment_id}/runs" if experiment_id else "experiments"
    return f"{base}/#/{page}?{ML_WORKFLOW}"


class TrackingStoreError(RuntimeError):
    """The tracking store cannot be written (named in the message)."""


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///...` URI (None for other stores)."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def create_if_new(uri: str) -> None:
    """A SQLite store that does not exist yet is created from the empty, already-migrated
    template (powerbench.tracking.empty_store); other stores are left alone."""
    from powerbench.tracking.empty_store import create_sqlite_store

    path = sqlite_path(uri)
    if path is not None:
        create_sqlite_store(path)


def artifact_root(uri: str) -> str | None:
    """Where a SQLite store's artifacts go: `mlartifacts/` beside its database file (the
    default store's is <cache>/mlartifacts); None for servers (they choose)."""
    path = sqlite_path(uri)
    return (path.parent / "mlartifacts").as_uri() if path is not None else None


def check_writable(uri: str) -> None:
    """Fail at once, naming the path, when a local store cannot be created, written or
    opened: a real write (a temp file beside the database) and a real SQLite open, so a
    read-only or pseudo filesystem fails in milliseconds, not after SQLAlchemy's retries."""
    import sqlite3
    import tempfile

    path = sqlite_path(uri)
    if path is None and uri.startswith(("file:", "/")):
        path = Path(uri.removeprefix("file://")) / "meta.yaml"
    if path is None:
        return
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TrackingStoreError(f"tracking store {uri}: cannot create {folder}: "
                                 f"{err.strerror or err}") from err
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".powerbench-write-check."):
            pass
    except OSError as err:
        raise TrackingStoreError(f"tracking store {uri}: {folder} is not writable "
                                 f"({err.strerror or err}); set tracking.uri to a writable "
                                 "path, or tracking=disabled") from err
    if sqlite_path(uri) is None:
        return
    create_if_new(uri)  # not an empty file left by the open below: MLflow would migrate it
    try:
        with sqlite3.connect(path, timeout=5) as db:
            db.execute("BEGIN IMMEDIATE")  # takes the write lock: the file is writable
            db.rollback()
        db.close()
    except sqlite3.Error as err:
        raise TrackingStoreError(f"tracking store {uri}: cannot open {path} as a SQLite "
                                 f"database for writing ({err}); set tracking.uri to another "
                                 "file, or tracking=disabled") from err


def is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


PROBE_TIMEOUT_S = 3.0  # one probe of a tracking server, no retries


def server_reachable(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """One probe of a tracking server (no retries): any HTTP answer counts as up."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False
