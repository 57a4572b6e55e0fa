"""Typed schemas for the `dataset` config group (registered in Hydra's ConfigStore)."""

from __future__ import annotations

from dataclasses import dataclass

from powerbench.schema_helpers import MISSING

DEFAULT_HELDOUT_FRACTION = 0.1
DEFAULT_SPLIT_SEED = 0


@dataclass
class DatasetConfig:
    """One text source. `_target_` names the loader; every loader returns a TextSplit.

    Documents (conversations rendered "User: ...\\nAssistant: ...", articles, lines of
    a text file) are de-duplicated, filtered by `min_chars`, capped at `max_docs` in
    source order, then split by a per-document hash: a document is held out iff
    hash(split_seed, text) < heldout_fraction, so its side never depends on the cap or
    on the other documents.
    """

    _target_: str = MISSING
    name: str = MISSING
    path: str | None = None  # a local file (sharegpt: a full ShareGPT JSON; local: json/jsonl/txt)
    hf_id: str | None = None  # hub datasets
    hf_config: str | None = None
    hf_split: str = "train"
    revision: str | None = None
    text_field: str = "text"  # records without conversations/instruction: the text field
    doc_separator: str = "\n\n"  # .txt files: documents are separated by this ("\n": lines)
    max_docs: int | None = None  # cap on documents (None: all)
    min_chars: int = 1  # drop shorter documents
    heldout_fraction: float = DEFAULT_HELDOUT_FRACTION
    split_seed: int = DEFAULT_SPLIT_SEED


SCHEMAS = {"sharegpt": DatasetConfig, "hub": DatasetConfig, "local": DatasetConfig}
