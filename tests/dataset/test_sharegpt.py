"""The tolerant ShareGPT reader: files cut mid-object, mid-string and mid-escape."""

from __future__ import annotations

import json
import time

import pytest

from powerbench.dataset import load_texts
from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.jsonarray import ArrayReadState, iter_json_array
from powerbench.dataset.sharegpt import load_sharegpt

CONVERSATIONS = [
    {"id": f"c{i}", "conversations": [
        {"from": "human", "value": f"Question {i}: what is \"quoted\"\nand\tescaped? caf\u00e9"},
        {"from": "gpt", "value": f"Answer {i} with a backslash \\ and unicode \u2603."},
    ]}
    for i in range(6)
]


def _file_text() -> str:
    return json.dumps(CONVERSATIONS, indent=2)


def _read(text: str) -> tuple[list, ArrayReadState]:
    state = ArrayReadState()
    return list(iter_json_array(text, state)), state


def _cut_in_record(text: str, record: int, needle: str, after: int = 0) -> str:
    """`text` cut inside record number `record`, at `needle` (+ `after` characters)."""
    start = text.index(f'"c{record}"')
    return text[: text.index(needle, start) + after]


@pytest.mark.parametrize(("name", "needle", "after"), [
    ("mid_object_after_key", '"conversations"', len('"conversations"')),
    ("mid_string", "Answer", 3),
    ("mid_escape_backslash", "\\n", 1),  # ends in a lone backslash
    ("mid_unicode_escape", "\\u00e9", 4),  # ends in "\u00"
    ("after_value_before_comma", "escaped?", 0),
])
def test_truncated_file_keeps_complete_records(name, needle, after):
    text = _cut_in_record(_file_text(), 4, needle, after)
    records, state = _read(text)
    assert records == CONVERSATIONS[:4]
    assert not state.complete and state.error


def test_cut_right_after_a_complete_record_or_comma():
    text = _file_text()
    end_of_3 = text.index('"c4"')
    cut_after_comma = text[: text.rindex(",", 0, end_of_3) + 1]
    records, state = _read(cut_after_comma)
    assert records == CONVERSATIONS[:4] and not state.complete
    cut_after_brace = cut_after_comma[:-1]
    records, state = _read(cut_after_brace)
    assert records == CONVERSATIONS[:4] and not state.complete


def test_complete_file_reads_everything():
    records, state = _read(_file_text())
    assert records == CONVERSATIONS and state.complete and state.error is None
    assert _read("[]")[0] == [] and _read("\ufeff [ ] ")[1].complete


def test_not_an_array_is_an_error():
    with pytest.raises(ValueError, match="not a JSON array"):
        _read('{"a": 1}')


def test_user_path_is_rendered_as_chat(tmp_path):
    path = tmp_path / "sharegpt.json"
    # cut in the middle of a multi-byte character too
    path.write_bytes(_cut_in_record(_file_text(), 5, "caf", 3).encode() + "\u00e9".encode()[:1])
    split = load_texts(DatasetConfig(_target_="powerbench.dataset.sharegpt.load_sharegpt",
                                     name="sharegpt", path=str(path), heldout_fraction=0.3))
    docs = split.train + split.heldout
    assert len(docs) == 5 and split.meta["records_parsed"] == 5
    assert split.meta["file_truncated"]
    first = next(d for d in docs if "Question 0:" in d)
    assert first == ('User: Question 0: what is "quoted"\nand\tescaped? caf\u00e9\n'
                     "Assistant: Answer 0 with a backslash \\ and unicode \u2603.")


def test_missing_user_path_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_sharegpt(DatasetConfig(_target_="x", name="sharegpt", path=str(tmp_path / "no.json")))


def test_bundled_sharegpt_parses_fast():
    start = time.perf_counter()
    split = load_texts(DatasetConfig(_target_="powerbench.dataset.sharegpt.load_sharegpt",
                                     name="sharegpt"))
    elapsed = time.perf_counter() - start
    assert split.meta["file_truncated"]
    assert 17_000 <= split.meta["records_parsed"] <= 18_500  # ~17.6k survive the cut
    assert 0.08 < len(split.heldout) / split.meta["docs"] < 0.12
    assert all(doc.startswith(("User: ", "System: ", "Assistant: ")) for doc in split.train[:200])
    assert elapsed < 30  # ~1.5 s on an idle core; generous for loaded CI machines
