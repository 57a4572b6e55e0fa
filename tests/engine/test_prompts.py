"""Benchmark batches: equal-length rows of exactly prompt_tokens tokens."""

from __future__ import annotations

import pytest

from powerbench.engine.prompts import build_prompt_batch

LONG = "sparse activation makes large language model inference faster " * 4


def test_long_prompts_are_cropped_in_order(tokenizer):
    batch = build_prompt_batch(tokenizer, ["", LONG, "the cat " + LONG], 10, 2)
    assert batch.shape == (2, 10)
    assert batch[0].tolist() == tokenizer(LONG)["input_ids"][:10]
    assert (batch[:, 0] == tokenizer.bos_token_id).all()


def test_short_prompts_are_concatenated(tokenizer):
    prompts = ["the cat", "a dog", "the fox jumps"]
    assert all(len(tokenizer(p)["input_ids"]) < 40 for p in prompts)
    batch = build_prompt_batch(tokenizer, prompts, 40, 3)
    assert batch.shape == (3, 40)
    assert len({tuple(r) for r in batch.tolist()}) == 3  # rows start at different prompts


def test_no_usable_prompts_or_tokenizer_raises(tokenizer):
    with pytest.raises(ValueError, match="non-empty"):
        build_prompt_batch(tokenizer, ["", "  "], 8, 1)
    with pytest.raises(ValueError, match="tokenizer"):
        build_prompt_batch(None, ["text"], 8, 1)
