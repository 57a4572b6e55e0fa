"""Content-addressed on-disk cache with corruption detection.

Entries are written atomically (temp file + rename) next to a JSON sidecar holding the
payload's SHA-256. A load whose bytes do not match the sidecar (truncated write,
bit rot, manual edit) is treated as a miss: the entry is deleted and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
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


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
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
        """Return (value, hit). A corrupt or unreadable entry is logged, removed, rebuilt."""
        if self.path(key).exists() or self._sidecar(key).exists():
            if self.valid(key):
                try:
                    return load(self.path(key)), True
                except Exception as err:  # noqa: BLE001 - any unreadable entry is a miss
                    log.warning("cache entry %s unreadable (%s); rebuilding", self.path(key), err)
            else:
                log.warning("cache entry %s is corrupt (checksum mismatch); rebuilding",
                            self.path(key))
            self.invalidate(key)
        value = build()
        self.store(key, lambda p: save(value, p), meta)
        return value, False
