"""Token selection filters."""

from __future__ import annotations

import math

import pytest
import torch

from powerbench.engine.sampling import Sampler, SamplingConfig, filter_top_k, filter_top_p


def _logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([[math.log(p) for p in probs]])


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([[0.1, 3.0, -1.0, 2.0, 0.5]])
    kept = torch.isfinite(filter_top_k(logits, 2))
    assert kept.tolist() == [[False, True, False, True, False]]
    assert torch.equal(filter_top_k(logits, 0), logits)


@pytest.mark.parametrize(("p", "n_kept"), [(0.3, 1), (0.75, 2), (0.85, 3), (1.0, 4)])
def test_top_p_keeps_the_smallest_set_reaching_p(p, n_kept):
    logits = _logits([0.15, 0.5, 0.05, 0.3])  # order: 0.5, 0.3, 0.15, 0.05
    kept = torch.isfinite(filter_top_p(logits, p))[0]
    assert int(kept.sum()) == n_kept
    ranked = [1, 3, 0, 2][:n_kept]
    assert all(kept[i] for i in ranked)


def test_suppressed_ids_are_never_chosen():
    logits = torch.tensor([[0.0, 9.0, 1.0], [5.0, 0.0, 9.0]])
    greedy = Sampler(SamplingConfig(suppress_ids=(1, 2)), torch.device("cpu"))
    assert greedy(logits).tolist() == [0, 0]
    sampler = Sampler(SamplingConfig(greedy=False, suppress_ids=(1,), seed=0), torch.device("cpu"))
    draws = torch.stack([sampler(logits) for _ in range(50)])
    assert not (draws == 1).any()


def test_sampling_needs_positive_temperature():
    with pytest.raises(ValueError):
        SamplingConfig(greedy=False, temperature=0.0)
