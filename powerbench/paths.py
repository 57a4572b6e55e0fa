"""Where powerbench keeps caches and results."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path | None:
    """The source checkout (editable install), or None for a site-packages install."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").exists() else None


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """Caches (trained tiny model, profiles, predictors, extensions, MLflow store).

    Order: explicit override, $POWERBENCH_CACHE, <repo>/.cache, ~/.cache/powerbench.
    """
    if override:
        path = Path(override)
    elif os.environ.get("POWERBENCH_CACHE"):
        path = Path(os.environ["POWERBENCH_CACHE"])
    elif (root := repo_root()) is not None:
        path = root / ".cache"
    else:
        path = Path.home() / ".cache" / "powerbench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def results_dir() -> Path:
    root = repo_root()
    path = (root if root is not None else Path.cwd()) / "results"
    path.mkdir(parents=True, exist_ok=True)
    return path
