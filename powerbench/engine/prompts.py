"""Benchmark prompt batches: every row exactly `prompt_tokens` tokens, so no padding."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

SEPARATOR = "\n\n"


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def build_prompt_batch(tokenizer: Any, prompts: Iterable[str], prompt_tokens: int,
                       batch_size: int) -> Tensor:
    """[batch_size, prompt_tokens] token ids from `prompts`.

    Rows come from the first prompts (in order) that tokenize to at least
    `prompt_tokens` tokens (special tokens such as BOS included), cropped to exactly
    that many. If there are fewer such prompts than rows, each remaining row
    concatenates consecutive prompts (separated by a blank line, starting at a
    different prompt per row, cycling through them) until it is long enough.
    """
    if tokenizer is None:
        raise ValueError("the model has no tokenizer; the engines need one to encode prompts")
    if prompt_tokens < 1 or batch_size < 1:
        raise ValueError(f"prompt_tokens={prompt_tokens} and batch_size={batch_size} must be >= 1")
    texts = [p for p in prompts if p and p.strip()]
    if not texts:
        raise ValueError("no non-empty prompts")
    rows: list[list[int]] = []
    for text in texts:
        ids = _ids(tokenizer, text)
        if len(ids) >= prompt_tokens:
            rows.append(ids[:prompt_tokens])
            if len(rows) == batch_size:
                break
    for r in range(batch_size - len(rows)):
        rows.append(_concatenated(tokenizer, texts, start=r, prompt_tokens=prompt_tokens))
    return torch.tensor(rows, dtype=torch.long)


def _concatenated(tokenizer: Any, texts: list[str], start: int, prompt_tokens: int) -> list[int]:
    parts: list[str] = []
    ids: list[int] = []
    i = start
    while len(ids) < prompt_tokens:
        parts.append(texts[i % len(texts)])
        i += 1
        longer = _ids(tokenizer, SEPARATOR.join(parts))
        if len(longer) <= len(ids) and i - start >= len(texts):
            raise ValueError("prompts do not grow when concatenated; cannot reach "
                             f"{prompt_tokens} tokens")
        ids = longer
    return ids[:prompt_tokens]
