"""Multiple-choice harness: hand-checkable scores on toy models; task construction."""

from __future__ import annotations

import math
import time

import pytest
import torch
from toy_lm import random_texts

from powerbench.evaluation import (
    MCChoice,
    MCItem,
    MCTaskUnavailableError,
    continuation_task,
    load_hf_task,
    load_mc_task,
    score_items,
)
from powerbench.evaluation.multiple_choice import continuation_loglik

P = torch.tensor([0.5, 0.25, 0.25])


def constant_model(ids: torch.Tensor) -> torch.Tensor:
    """Every position predicts token 0 w.p. 0.5, tokens 1 and 2 w.p. 0.25."""
    return torch.log(P).expand(*ids.shape, 3)


def successor_model(ids: torch.Tensor, vocab: int = 10) -> torch.Tensor:
    """Next token = current + 1 (mod vocab) w.p. ~1: checks logits/target alignment."""
    return 20.0 * torch.nn.functional.one_hot((ids + 1) % vocab, vocab).float()


def test_loglik_hand_computed():
    choices = [MCChoice((2,), (1,)), MCChoice((2, 2), (0, 0, 0)), MCChoice((1,), (2, 0))]
    ll = continuation_loglik(constant_model, choices, batch_size=2)
    expected = [math.log(0.25), 3 * math.log(0.5), math.log(0.25) + math.log(0.5)]
    assert ll == pytest.approx(expected, rel=1e-6)


def test_length_normalisation_changes_the_answer_as_documented():
    # A: one token at p=.25 (sum -1.386, mean -1.386); B: three tokens at p=.5 (sum -2.079,
    # mean -0.693). Summed log-likelihood picks A, per-token mean picks B.
    item = MCItem((MCChoice((1,), (1,), n_bytes=1), MCChoice((1,), (0, 0, 0), n_bytes=6)), 0)
    assert score_items(constant_model, [item], "none").predictions == [0]
    assert score_items(constant_model, [item], "tokens").predictions == [1]
    per_byte = score_items(constant_model, [item], "bytes").scores[0]
    assert per_byte == pytest.approx([math.log(0.25), 3 * math.log(0.5) / 6])


def test_successor_model_gets_every_item_right_and_alignment_matters():
    items = [MCItem((MCChoice((3,), (5, 6)), MCChoice((3,), (4, 5)), MCChoice((3, 4), (6, 7))), 1),
             MCItem((MCChoice((7, 8), (9, 0)), MCChoice((7, 8), (1, 2))), 0)]
    result = score_items(successor_model, items, batch_size=3)
    assert result.accuracy == 1.0 and result.predictions == [1, 0]
    assert result.scores[0][1] == pytest.approx(0.0, abs=1e-6)  # log(~1)
    # the third choice's context (3, 4) predicts 5, not 6: it must score low
    assert result.scores[0][2] < -10


def test_context_is_truncated_from_the_left():
    choice = MCChoice(tuple(range(1, 9)), (9,))
    ll = continuation_loglik(successor_model, [choice], max_len=4)
    assert ll[0] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="max_len"):
        continuation_loglik(successor_model, [MCChoice((1,), (2, 3, 4))], max_len=3)


def test_continuation_task_is_deterministic_and_holds_the_true_continuation(word_tokenizer):
    texts = random_texts(12, 40)
    items = continuation_task(word_tokenizer, texts, n_items=30, n_choices=4,
                              context_tokens=10, continuation_tokens=3, seed=1)
    again = continuation_task(word_tokenizer, texts, n_items=30, n_choices=4,
                              context_tokens=10, continuation_tokens=3, seed=1)
    assert items == again and len(items) == 30
    docs = [tuple(word_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    labels = set()
    for item in items:
        labels.add(item.label)
        truth = item.choices[item.label]
        assert len(truth.context) == 10 and all(len(c.continuation) == 3 for c in item.choices)
        assert any(_contains(doc, truth.context + truth.continuation) for doc in docs)
        assert len({c.continuation for c in item.choices}) == 4
    assert len(labels) > 1  # the answer position varies
    assert continuation_task(word_tokenizer, texts, n_items=30, context_tokens=10,
                             continuation_tokens=3, seed=2) != items


def _contains(doc: tuple, span: tuple) -> bool:
    return any(doc[i:i + len(span)] == span for i in range(len(doc) - len(span) + 1))


def test_hf_sets_fail_fast_offline(monkeypatch, word_tokenizer):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises((MCTaskUnavailableError, Exception)) as err:
        load_hf_task("arc_easy", word_tokenizer, 10)
    assert time.perf_counter() - start < 10
    assert err.type is MCTaskUnavailableError
    assert "continuation" in str(err.value)
    with pytest.raises(ValueError, match="known"):
        load_mc_task("no_such_task", word_tokenizer, [])
