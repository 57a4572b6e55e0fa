"""Hub datasets: offline they fail at once with what to do; wikitext article grouping."""

from __future__ import annotations

import os
import time

import pytest

from powerbench.config import load_config
from powerbench.dataset import DatasetUnavailableError, load_texts
from powerbench.dataset.hub import wikitext_articles


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Offline with empty caches (a dataset cached on this machine would load offline)."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf_hub"))


@pytest.mark.parametrize("option", ["alpaca", "chatgpt_prompts", "wikitext"])
def test_offline_hub_dataset_fails_fast_and_clearly(offline, option):
    cfg = load_config([f"dataset={option}"])
    env_before = dict(os.environ)
    start = time.perf_counter()
    with pytest.raises(DatasetUnavailableError) as err:
        load_texts(cfg.dataset)
    assert time.perf_counter() - start < 5
    message = str(err.value)
    assert cfg.dataset.hf_id in message and "dataset=local" in message
    assert "dataset=sharegpt" in message
    assert dict(os.environ) == env_before


def test_wikitext_lines_grouped_into_articles():
    lines = [" = Alpha = \n", "\n", " Alpha text . \n", " = = Section = = \n", " more . \n",
             " = Beta = \n", " Beta text . \n"]
    articles = list(wikitext_articles(lines))
    assert articles == [" = Alpha = \n\n Alpha text . \n = = Section = = \n more . \n",
                        " = Beta = \n Beta text . \n"]
