"""Where powerbench keeps caches and results, and the checks that they can be written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CACHE_ENV = "POWERBENCH_CACHE"


class UnwritablePathError(OSError):
    """A directory powerbench must write to cannot be written (the message names the
    setting that chose it and the path)."""


def repo_root() -> Path | None:
    """The source checkout (editable install), or None for a site-packages install."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").exists() else None


def cache_setting(override: str | os.PathLike | None = None) -> str:
    """Which setting chooses the cache directory: `cache_dir`, `$POWERBENCH_CACHE` or the
    default."""
    if override:
        return "cache_dir"
    if os.environ.get(CACHE_ENV):
        return f"${CACHE_ENV}"
    return "the default cache directory (set cache_dir=<dir> or $POWERBENCH_CACHE)"


def _cache_path(override: str | os.PathLike | None) -> Path:
    if override:
        return Path(override)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if (root := repo_root()) is not None:
        return root / ".cache"
    return Path.home() / ".cache" / "powerbench"


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """Caches (trained tiny model, profiles, predictors, extensions, MLflow store).

    Order: explicit override, $POWERBENCH_CACHE, <repo>/.cache, ~/.cache/powerbench.
    A directory that cannot be created raises UnwritablePathError naming the setting.
    """
    path = _cache_path(override)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UnwritablePathError(
            f"{cache_setting(override)} = {path}: cannot create it ({err.strerror or err}); "
            "point it at a writable directory") from err
    return path


def check_writable_dir(path: Path, setting: str) -> Path:
    """Create `path` and write (then delete) a file in it: a real write, so read-only
    mounts, full quotas and root-on-/proc all fail here, before any work, naming `setting`."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".powerbench-write-check."):
            pass
    except OSError as err:
        raise UnwritablePathError(
            f"{setting} = {path} is not writable ({err.strerror or err}); "
            "point it at a writable directory") from err
    return path


def check_cache_writable(override: str | os.PathLike | None = None) -> Path:
    """The cache directory, checked by a real write (see check_writable_dir)."""
    return check_writable_dir(_cache_path(override), cache_setting(override))


def results_dir() -> Path:
    root = repo_root()
    path = (root if root is not None else Path.cwd()) / "results"
    path.mkdir(parents=True, exist_ok=True)
    return path
