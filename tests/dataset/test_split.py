"""The deterministic train / held-out split."""

from __future__ import annotations

import random

import pytest

from powerbench.dataset.split import collect_docs, heldout_score, make_split, split_texts

DOCS = [f"document number {i} about topic {i % 7}" for i in range(2000)]


def test_same_input_same_split_and_disjoint():
    a = split_texts(DOCS, 0.1, seed=0)
    b = split_texts(list(DOCS), 0.1, seed=0)
    assert a == b
    train, held = a
    assert not set(train) & set(held)
    assert sorted(train + held) == sorted(DOCS)
    assert 0.08 < len(held) / len(DOCS) < 0.12


def test_membership_ignores_order_cap_and_other_documents():
    _, held = split_texts(DOCS, 0.1, seed=0)
    shuffled = DOCS[:]
    random.Random(1).shuffle(shuffled)
    _, held_shuffled = split_texts(shuffled, 0.1, seed=0)
    assert set(held) == set(held_shuffled)
    _, held_capped = split_texts(DOCS[:500], 0.1, seed=0)
    assert set(held_capped) == set(held) & set(DOCS[:500])


def test_seed_and_fraction_change_the_split():
    _, held0 = split_texts(DOCS, 0.1, seed=0)
    _, held1 = split_texts(DOCS, 0.1, seed=1)
    assert set(held0) != set(held1)
    _, held_big = split_texts(DOCS, 0.3, seed=0)
    assert set(held0) < set(held_big)  # a larger fraction only adds documents


def test_order_within_each_side_is_source_order():
    train, held = split_texts(DOCS, 0.2, seed=0)
    assert train == [d for d in DOCS if d in set(train)]
    assert held == [d for d in DOCS if d in set(held)]


def test_tiny_corpora_still_hold_out_one_document():
    docs = ["a b c", "d e f", "g h i"]
    scores = [heldout_score(d) for d in docs]
    assert min(scores) >= 0.01  # so the hash rule alone holds out nothing
    train, held = split_texts(docs, 0.01, seed=0)
    lowest = docs[scores.index(min(scores))]
    assert held == [lowest] and train == [d for d in docs if d != lowest]
    assert split_texts(docs, 0.0, seed=0) == (docs, [])
    with pytest.raises(ValueError):
        split_texts(docs, 1.0, seed=0)


def test_collect_dedupes_filters_and_caps():
    texts = ["  one  ", "one", "", "x", "two", "three", "four"]
    docs, stats = collect_docs(texts, max_docs=3, min_chars=2)
    assert docs == ["one", "two", "three"]
    assert stats == {"docs_read": 6, "docs_short": 2, "docs_duplicate": 1}


def test_make_split_records_counts():
    split = make_split("demo", "test", DOCS[:100], heldout_fraction=0.1, split_seed=0)
    assert split.meta["docs"] == 100 and len(split.train) + len(split.heldout) == 100
    assert split.fingerprint() == make_split("demo", "test", DOCS[:100], heldout_fraction=0.1,
                                             split_seed=0).fingerprint()
    assert split.fingerprint() != make_split("demo", "test", DOCS[:99], heldout_fraction=0.1,
                                             split_seed=0).fingerprint()
    with pytest.raises(ValueError, match="no usable documents"):
        make_split("empty", "test", ["", " "], heldout_fraction=0.1, split_seed=0)
