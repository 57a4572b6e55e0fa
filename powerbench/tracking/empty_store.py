"""A new SQLite store starts as a copy of an empty, already-migrated MLflow database.

MLflow builds a new SQLite store by running its ~60 schema migrations (2-3 s on two
cores, every time). `create_sqlite_store` instead copies an empty store made once per
MLflow version, `<cache>/mlflow-empty/mlflow-<version>.db` (the cache: $POWERBENCH_CACHE,
<repo>/.cache or ~/.cache/powerbench; not the `cache_dir` setting, which tests and users
vary per run). The template holds MLflow's schema and its default workspace, but not the
Default experiment: MLflow adds that on first open, with this store's own artifact
location, as it does for a store it migrated itself.

The copy appears atomically (a hard link of a finished copy, never over an existing
file), so a store some other process is creating is never replaced. Anything that goes
wrong (an unwritable cache, a file system without hard links) leaves the store to MLflow,
which migrates it as before: the template only ever saves time.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
from importlib.metadata import version
from pathlib import Path

log = logging.getLogger(__name__)

TEMPLATE_DIR = "mlflow-empty"
SQLITE_HEADER = b"SQLite format 3\x00"


def template_path() -> Path:
    """Where the empty store of the installed MLflow version is kept."""
    from powerbench.paths import cache_dir

    return cache_dir() / TEMPLATE_DIR / f"mlflow-{version('mlflow')}.db"


def _build_template(path: Path) -> None:
    """An empty store made by MLflow itself (every migration), less its Default
    experiment, written atomically to `path`."""
    from mlflow.tracking import MlflowClient

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
        built = Path(tmp) / "store.db"
        MlflowClient(tracking_uri=f"sqlite:///{built}").search_experiments()
        staged = Path(tmp) / "template.db"
        source = sqlite3.connect(built)
        target = sqlite3.connect(staged)
        try:
            with source:
                source.execute("DELETE FROM experiments")
            source.backup(target)  # a consistent copy, whatever MLflow still holds open
        finally:
            source.close()
            target.close()
        os.replace(staged, path)


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def create_sqlite_store(path: Path) -> bool:
    """Create the SQLite store `path` (absent) from the template; True if it did. False
    (MLflow will create and migrate it as usual) when `path` exists, even empty, when its
    folder does not exist, or when the template cannot be made or copied."""
    if path.exists():
        return False
    try:
        template = template_path()
        if not _is_sqlite(template):  # absent (or damaged): made again
            _build_template(template)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".new")
        os.close(fd)
        staged = Path(name)
        try:
            shutil.copyfile(template, staged)
            os.link(staged, path)  # atomic, and never over a store that appeared meanwhile
        finally:
            staged.unlink(missing_ok=True)
    except FileExistsError:
        return False
    except Exception as err:  # noqa: BLE001 - only a speed-up: MLflow creates it instead
        log.debug("no MLflow store template for %s (%s): MLflow migrates it", path, err)
        return False
    return True
