"""Multiple-choice task sets.

- `continuation` (offline, built here): from held-out documents, a context of
  `context_tokens` tokens and its true next `continuation_tokens` tokens, against
  distractor spans of the same length from other documents. Deterministic for a seed.
- `piqa`, `winogrande`, `arc_easy`: Hugging Face datasets, loaded with `datasets` when
  the hub is reachable (or they are in the local cache with HF_HUB_OFFLINE=1);
  otherwise `MCTaskUnavailableError` at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from powerbench.evaluation.multiple_choice import MCChoice, MCItem


class MCTaskUnavailableError(RuntimeError):
    """A benchmark set cannot be loaded here (offline and not cached)."""


def _ids(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def _choice(tokenizer, context: str, continuation: str) -> MCChoice:
    return MCChoice(_ids(tokenizer, context), _ids(tokenizer, continuation),
                    len(continuation.encode()))


# ---- offline: continuation choice from held-out text -------------------------------------

def continuation_task(tokenizer, texts: Sequence[str], n_items: int = 200, n_choices: int = 4,
                      context_tokens: int = 48, continuation_tokens: int = 8,
                      seed: int = 0) -> list[MCItem]:
    """True continuation vs spans from other documents (token-level, so no re-tokenising)."""
    span = context_tokens + continuation_tokens
    # one batch call (a fast tokenizer encodes it in Rust, without padding the same ids as
    # text by text)
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    docs = [tuple(ids) for ids in encoded if len(ids) >= span]
    if len(docs) < n_choices:
        raise ValueError(f"continuation task needs {n_choices} documents of >= {span} tokens, "
                         f"the held-out text has {len(docs)}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(docs))
    items: list[MCItem] = []
    attempts = 0
    while len(items) < n_items and attempts < 4 * n_items:
        attempts += 1
        d = int(order[(attempts - 1) % len(docs)])
        doc = docs[d]
        start = int(rng.integers(0, len(doc) - span + 1))
        context = doc[start:start + context_tokens]
        truth = doc[start + context_tokens:start + span]
        others = rng.choice(np.delete(np.arange(len(docs)), d), n_choices - 1, replace=False)
        distractors = []
        for o in others:
            other = docs[int(o)]
            s = int(rng.integers(0, len(other) - continuation_tokens + 1))
            distractors.append(other[s:s + continuation_tokens])
        if truth in distractors:
            continue
        label = int(rng.integers(0, n_choices))
        conts = distractors[:label] + [truth] + distractors[label:]
        choices = tuple(MCChoice(context, c, len(tokenizer.decode(list(c)).encode()))
                        for c in conts)
        items.append(MCItem(choices, label))
    return items


# ---- online: Hugging Face benchmark sets ------------------------------------------------

def _piqa(row: dict, tok) -> MCItem:
    ctx = f"Question: {row['goal']}\nAnswer:"
    return MCItem((_choice(tok, ctx, " " + row["sol1"]), _choice(tok, ctx, " " + row["sol2"])),
                  int(row["label"]))


def _winogrande(row: dict, tok) -> MCItem:
    sentence = row["sentence"]
    cut = sentence.index("_")
    rest = " " + sentence[cut + 1:].strip()
    choices = tuple(_choice(tok, sentence[:cut] + row[k], rest) for k in ("option1", "option2"))
    return MCItem(choices, int(row["answer"]) - 1)


def _arc(row: dict, tok) -> MCItem:
    ctx = f"Question: {row['question']}\nAnswer:"
    texts, labels = row["choices"]["text"], row["choices"]["label"]
    return MCItem(tuple(_choice(tok, ctx, " " + t) for t in texts),
                  labels.index(row["answerKey"]))


@dataclass(frozen=True)
class HFTask:
    path: str
    config: str | None
    split: str
    to_item: Callable[[dict, Any], MCItem]


HF_TASKS: dict[str, HFTask] = {
    "piqa": HFTask("ybisk/piqa", None, "validation", _piqa),
    "winogrande": HFTask("allenai/winogrande", "winogrande_xl", "validation", _winogrande),
    "arc_easy": HFTask("allenai/ai2_arc", "ARC-Easy", "test", _arc),
}


def _offline() -> bool:
    from powerbench.hub import hub_reachable

    return not hub_reachable()


def load_hf_task(name: str, tokenizer, n_items: int | None = None) -> list[MCItem]:
    if name not in HF_TASKS:
        raise ValueError(f"unknown multiple-choice set {name!r}; known: {sorted(HF_TASKS)}")
    task = HF_TASKS[name]
    offline = _offline()
    env_offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    advice = (f"multiple-choice set {name!r} ({task.path}) is not available: the hub is "
              "unreachable and it is not in the local datasets cache. Run once with network "
              "access, or use eval mc_task=continuation (built offline from held-out text).")
    if offline and not env_offline:
        # datasets would retry the network; with HF_HUB_OFFLINE=1 it reads the cache only
        raise MCTaskUnavailableError(advice)
    import datasets

    try:
        rows = datasets.load_dataset(task.path, task.config, split=task.split)
    except Exception as err:  # noqa: BLE001 - any loading failure means "not available"
        if offline:
            raise MCTaskUnavailableError(advice) from err
        raise
    limit = len(rows) if n_items is None else min(n_items, len(rows))
    return [task.to_item(rows[i], tokenizer) for i in range(limit)]


def _hf_builder(name: str) -> Callable[..., list[MCItem]]:
    def build(tokenizer, heldout_texts, n_items=200, seed=0, **_: Any) -> list[MCItem]:
        return load_hf_task(name, tokenizer, n_items)

    return build


MC_TASKS: dict[str, Callable[..., list[MCItem]]] = {
    "continuation": lambda tok, texts, n_items=200, seed=0, **opts: continuation_task(
        tok, texts, n_items=n_items, seed=seed, **opts),
    **{name: _hf_builder(name) for name in HF_TASKS},
}


def load_mc_task(name: str, tokenizer, heldout_texts: Sequence[str], n_items: int = 200,
                 seed: int = 0, **options: Any) -> list[MCItem]:
    """`continuation` (offline; `options` go to `continuation_task`) or one of HF_TASKS."""
    if name not in MC_TASKS:
        raise ValueError(f"unknown multiple-choice task {name!r}; known: {sorted(MC_TASKS)}")
    return MC_TASKS[name](tokenizer, heldout_texts, n_items=n_items, seed=seed, **options)
