"""The token-overlap measurement and its Markov union model on hand-checked traces."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.profiling.token_overlap import measure_overlap, union_fraction


def test_union_fraction_hand_checked():
    p = np.array([0.5])
    assert union_fraction(p, 1, 0.5)[0] == pytest.approx(0.5)
    assert union_fraction(p, 2)[0] == pytest.approx(0.75)  # 1 - 0.5^2
    # stays off: 0.5 (off) x (1 - 0.5 (1 - 0.5)) (off -> off) = 0.375
    assert union_fraction(p, 2, 0.5)[0] == pytest.approx(0.625)
    with pytest.raises(ValueError, match="rho"):
        union_fraction(p, 2, 1.0)
    with pytest.raises(ValueError, match="rows"):
        union_fraction(p, 0)


def test_measure_overlap_counts_pairs_and_windows_within_sequences():
    # one neuron, two sequences of 4 tokens: on on off off | on off on off
    mask = np.array([[1], [1], [0], [0], [1], [0], [1], [0]], dtype=bool)
    stats = measure_overlap("hand", [mask], seq_len=4, batch_sizes=(1, 2, 4))
    assert stats.active == pytest.approx(0.5)
    # adjacent pairs inside sequences that start on: (on,on) (on,off) | (on,off) (on,off)
    assert stats.persistence == pytest.approx(0.25)
    assert stats.lag1_rho == pytest.approx((0.25 - 0.5) / 0.5)
    # windows of 2: [11, 10, 00] and [10, 01, 10] -> 5 of 6 contain an on
    assert stats.union[2] == pytest.approx(5 / 6)
    assert stats.union[4] == pytest.approx(1.0)
    assert stats.independent[2] == pytest.approx(0.75)


def test_fitted_rho_recovers_a_markov_chain():
    rng = np.random.default_rng(0)
    n, tokens, rho = 400, 2048, 0.3
    p = rng.uniform(0.02, 0.3, size=n)
    on = np.zeros((tokens, n), dtype=bool)
    on[0] = rng.random(n) < p
    for t in range(1, tokens):
        stay = p + rho * (1 - p)
        start = p * (1 - rho)
        on[t] = np.where(on[t - 1], rng.random(n) < stay, rng.random(n) < start)
    stats = measure_overlap("markov", [on], seq_len=128)
    # pooled P(on | on) weights neurons by p: sum p (p + rho (1 - p)) / sum p
    assert stats.persistence == pytest.approx(
        float((p * (p + rho * (1 - p))).sum() / p.sum()), abs=0.01)
    assert stats.fitted_rho == pytest.approx(rho, abs=0.05)
    assert stats.union[64] < stats.independent[64]


def test_independent_tokens_fit_no_overlap():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.02, 0.3, size=400)
    masks = rng.random((2048, 400)) < p
    assert measure_overlap("iid", [masks], seq_len=128).fitted_rho < 0.03
