"""Text datasets, rendered to plain-text documents and split into train / held-out.

`load_texts(cfg)` calls the `_target_` loader of a `conf/dataset` node:
`sharegpt` (bundled, offline), `alpaca`, `chatgpt_prompts`, `wikitext` (hub) and `local`
(any JSON / JSONL / text file).
"""

from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.errors import DatasetUnavailableError
from powerbench.dataset.load import load_texts
from powerbench.dataset.split import TextSplit, heldout_score, split_texts

__all__ = ["DatasetConfig", "DatasetUnavailableError", "TextSplit", "heldout_score", "load_texts", "split_texts"]
