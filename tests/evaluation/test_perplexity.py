"""Perplexity equals a hand-computed value on a toy model."""

from __future__ import annotations

import math

import torch

from powerbench.evaluation import perplexity


def test_uniform_model_has_vocab_perplexity():
    vocab = 7
    windows = torch.randint(0, vocab, (3, 5))
    result = perplexity(lambda ids: torch.zeros(*ids.shape, vocab), windows)
    assert math.isclose(result.perplexity, vocab, rel_tol=1e-6)
    assert result.tokens == 3 * 4


def test_hand_computed_bigram():
    # Toy model: always predicts token 0 with p=0.5, tokens 1 and 2 with p=0.25 each.
    logits = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    windows = torch.tensor([[0, 0, 1, 2]])  # predicted: 0 (p .5), 1 (.25), 2 (.25)
    result = perplexity(lambda ids: logits.expand(*ids.shape, 3), windows)
    expected = math.exp(-(math.log(0.5) + 2 * math.log(0.25)) / 3)
    assert math.isclose(result.perplexity, expected, rel_tol=1e-6)
