"""dataset=local: JSON, JSONL and text files, through load_texts and the Hydra option."""

from __future__ import annotations

import json

import pytest

from powerbench.config import load_config
from powerbench.dataset import load_texts
from powerbench.dataset.config import DatasetConfig


def _local(path, **extra):
    return DatasetConfig(_target_="powerbench.dataset.local.load_local", name="local",
                         path=str(path), heldout_fraction=0.25, **extra)


def _all(split):
    return sorted(split.train + split.heldout)


def test_json_array_of_mixed_records(tmp_path):
    records = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"instruction": "Add.", "input": "1 + 1", "output": "2"},
        {"text": "plain text"},
        "a bare string",
    ]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records)[:-1])  # cut off: the closing bracket is missing
    split = load_texts(_local(path))
    assert _all(split) == sorted([
        "User: hi\nAssistant: hello", "User: q\nAssistant: a",
        "User: Add.\n\n1 + 1\nAssistant: 2", "plain text", "a bare string"])


def test_jsonl_with_a_broken_line_and_text_field(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"body": "first"}\n\n{"body": "second"}\n{"body": "thi')
    split = load_texts(_local(path, text_field="body"))
    assert _all(split) == ["first", "second"]


def test_missing_text_field_is_a_clear_error(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"body": "first"}\n')
    with pytest.raises(ValueError, match="text_field"):
        load_texts(_local(path))


def test_text_file_paragraphs_and_lines(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("para one\nstill one\n\npara two\n\n\n\npara three\npara three\n")
    assert _all(load_texts(_local(path))) == sorted(
        ["para one\nstill one", "para two", "para three\npara three"])
    lines = load_texts(_local(path, doc_separator="\n", max_docs=3))
    assert _all(lines) == sorted(["para one", "still one", "para two"])


def test_missing_file_and_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_texts(_local(tmp_path / "nope.txt"))
    with pytest.raises(ValueError, match="dataset.path"):
        load_texts(DatasetConfig(_target_="powerbench.dataset.local.load_local", name="local"))


def test_hydra_option_instantiates_the_loader(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("\n\n".join(f"doc {i}" for i in range(40)))
    cfg = load_config(["dataset=local", f"dataset.path={path}"])
    split = load_texts(cfg.dataset)
    assert split.name == "local" and len(split.train) + len(split.heldout) == 40
    assert split.source == f"local:{path}" and split.heldout


def test_broken_local_json_dataset_error_names_the_file(tmp_path, caplog):
    from powerbench.dataset.errors import DatasetError

    path = tmp_path / "prompts.json"
    path.write_text('[{"text": "the only complete record"}, {"text": "cut of')
    with pytest.raises(DatasetError, match=f"local:{path}.*1 usable document"):
        load_texts(_local(path))
    assert str(path) in caplog.text  # the reader's warning names it too


def test_a_file_with_no_usable_documents_names_the_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text('{"text": ""}\n{"text": "   "}\n')
    with pytest.raises(ValueError, match=f"local:{path}.*no usable documents"):
        load_texts(_local(path))
