"""Content-addressed on-disk cache with corruption detection.

Entries are written atomically (temp file + rename) next to a JSON sidecar holding the
payload's SHA-256. A load whose bytes do not match the sidecar (truncated write,
bit rot, manual edit) is treated as a miss: the entry is deleted and rebuilt.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def stable_hash(*parts: Any, length: int = 16) -> str:
    """Hash of JSON-able parts (dicts sorted), bytes or strings."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, bytes):
            h.update(part)
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()[:length]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class DiskFullError(OSError):
    """No space left writing a file: the message names the path, the space it needed and
    the space free on that filesystem."""


def _mb(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.1f} MB"


def disk_full_error(path: Path, written: int, needed: int | None = None) -> DiskFullError:
    """The error for ENOSPC while writing `path` after `written` bytes (`needed`: the full
    size when the caller knows it; else at least what was written before the disk filled)."""
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = 0
    need = f"{_mb(needed)}" if needed else f"more than {_mb(written)}"
    return DiskFullError(errno.ENOSPC, f"no space left on device writing {path}: it needs "
                         f"{need}, {_mb(free)} free on that filesystem; free some space or "
                         "point cache_dir (or $POWERBENCH_CACHE) at a bigger disk", str(path))


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created; fcntl, released when the holder exits or dies):
    concurrent processes building the same entry wait for one build instead of each doing it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process building %s", path.with_suffix(""))
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _atomic_write(path: Path, write: Callable[[Path], None], needed: int | None = None) -> None:
    """`write(tmp)` then rename onto `path`: a reader sees the old file or the whole new one.
    ENOSPC becomes a DiskFullError naming the path and the space needed (nothing partial
    is left)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except OSError as err:
        if err.errno != errno.ENOSPC or isinstance(err, DiskFullError):
            raise
        written = os.path.getsize(tmp) if os.path.exists(tmp) else 0
        raise disk_full_error(path, written, needed) from err
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class ArtifactCache:
    """One directory of checksummed entries: `<dir>/<key><suffix>` + `<key><suffix>.json`."""

    def __init__(self, directory: Path, suffix: str = ".bin") -> None:
        self.directory = Path(directory)
        self.suffix = suffix

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{self.suffix}"

    def _sidecar(self, key: str) -> Path:
        return self.directory / f"{key}{self.suffix}.json"

    def valid(self, key: str) -> bool:
        """True if the entry exists and its bytes match the recorded checksum."""
        path, sidecar = self.path(key), self._sidecar(key)
        if not path.exists() or not sidecar.exists():
            return False
        try:
            meta = json.loads(sidecar.read_text())
            return meta.get("sha256") == file_sha256(path)
        except (OSError, ValueError):
            return False

    def store(self, key: str, write: Callable[[Path], None], meta: dict | None = None) -> Path:
        path = self.path(key)
        _atomic_write(path, write)
        record = dict(meta or {}, sha256=file_sha256(path))
        _atomic_write(self._sidecar(key), lambda p: p.write_text(json.dumps(record, indent=1)))
        return path

    def meta(self, key: str) -> dict:
        return json.loads(self._sidecar(key).read_text())

    def invalidate(self, key: str) -> None:
        for p in (self.path(key), self._sidecar(key)):
            p.unlink(missing_ok=True)

    def get_or_build(
        self,
        key: str,
        build: Callable[[], Any],
        save: Callable[[Any, Path], None],
        load: Callable[[Path], Any],
        meta: dict | None = None,
    ) -> tuple[Any, bool]:
        """Return (value, hit). A corrupt or unreadable entry is logged, removed, rebuilt.
        Processes asking for the same missing key build it once: the others wait on its lock
        and then load it."""
        hit = self._load(key, load)
        if hit is not None:
            return hit[0], True
        with file_lock(self.directory / f".{key}{self.suffix}.lock"):
            hit = self._load(key, load)  # built by the process we waited for
            if hit is not None:
                return hit[0], True
            value = build()
            self.store(key, lambda p: save(value, p), meta)
        return value, False

    def _load(self, key: str, load: Callable[[Path], Any]) -> tuple[Any] | None:
        """(value,) of a valid entry; None when missing (a corrupt one is removed)."""
        if self.path(key).exists() or self._sidecar(key).exists():
            if self.valid(key):
                try:
                    return (load(self.path(key)),)
                except Exception as err:  # noqa: BLE001 - any unreadable entry is a miss
                    log.warning("cache entry %s unreadable (%s); rebuilding", self.path(key), err)
            else:
                log.warning("cache entry %s is corrupt (checksum mismatch); rebuilding",
                            self.path(key))
            self.invalidate(key)
        return None
