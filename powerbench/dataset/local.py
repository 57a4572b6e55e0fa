"""Any local JSON / JSONL / text file as a dataset.

- `.json`: a top-level array of records (read tolerantly: a file cut off mid-array keeps
  its complete records);
- `.jsonl` / `.ndjson`: one record per line (a broken last line is skipped);
- anything else: plain text, documents separated by `doc_separator` (blank line by
  default; "\\n" for one document per line).

Records are ShareGPT conversations (`conversations`/`messages`), Alpaca triples
(`instruction`, `input`, `output`), objects with a `text_field`, or strings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.jsonarray import ArrayReadState, iter_json_array, read_text
from powerbench.dataset.render import render_record
from powerbench.dataset.split import TextSplit, make_split

log = logging.getLogger(__name__)


def _json_records(path: Path, cfg: DatasetConfig) -> Iterator[Any]:
    state = ArrayReadState()
    yield from iter_json_array(read_text(path), state)
    if not state.complete:
        log.warning("%s: JSON array cut off or broken after %d records (%s)", path,
                    state.elements, state.error)


def _jsonl_records(path: Path, cfg: DatasetConfig) -> Iterator[Any]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as err:
                    log.warning("%s:%d: skipping a broken line (%s)", path, number, err.msg)


def _text_documents(path: Path, cfg: DatasetConfig) -> Iterator[str]:
    if not cfg.doc_separator:
        raise ValueError("dataset.doc_separator must not be empty")
    yield from read_text(path).split(cfg.doc_separator)


_READERS: dict[str, Callable[[Path, DatasetConfig], Iterator[Any]]] = {
    ".json": _json_records,
    ".jsonl": _jsonl_records,
    ".ndjson": _jsonl_records,
}


def local_documents(path: Path, cfg: DatasetConfig) -> Iterator[str]:
    reader = _READERS.get(path.suffix.lower(), _text_documents)
    for record in reader(path, cfg):
        yield render_record(record, cfg.text_field)


def load_local(cfg: DatasetConfig, **_: Any) -> TextSplit:
    if not cfg.path:
        raise ValueError("dataset=local needs dataset.path=<file.json|file.jsonl|file.txt>")
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"dataset {cfg.name!r}: {path} does not exist")
    split = make_split(cfg.name, f"local:{path}", local_documents(path, cfg),
                       heldout_fraction=cfg.heldout_fraction, split_seed=cfg.split_seed,
                       max_docs=cfg.max_docs, min_chars=cfg.min_chars)
    log.info("dataset %s: %d train / %d held-out documents from %s", cfg.name,
             len(split.train), len(split.heldout), path)
    return split
