"""The segmented cache's policies on hand-made traces."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.solver.neuron_cache import SegmentedNeuronCache, SegmentPlan, plan_segments


def cache(hot: list[list[int]], lru: list[int], units: int = 10) -> SegmentedNeuronCache:
    plan = SegmentPlan(hot=tuple(np.array(h, dtype=np.int64) for h in hot), lru=tuple(lru))
    return SegmentedNeuronCache(plan, units)


def test_lru_evicts_the_least_recently_used():
    c = cache([[]], [2])
    assert c.access(0, [1]) == (0, 1)
    assert c.access(0, [2]) == (0, 1)
    assert c.access(0, [1]) == (1, 0)  # 1 is now the most recent
    assert c.access(0, [3]) == (0, 1)  # evicts 2, not 1
    assert c.segment_of(0, 2) is None
    assert set(c.resident(0)) == {1, 3}
    assert list(c.lru_order(0)) == [1, 3]
    assert c.access(0, [2]) == (0, 1)  # evicts 1
    assert list(c.lru_order(0)) == [3, 2]
    s = c.stats
    assert (s.lookups, s.lru_hits, s.misses, s.admitted, s.evicted) == (5, 1, 4, 4, 2)
    assert s.hot_hits == 0 and s.hit_rate == pytest.approx(1 / 5)


def test_order_within_one_access_counts():
    c = cache([[]], [3])
    c.access(0, [4, 5, 6])
    assert list(c.lru_order(0)) == [4, 5, 6]
    c.access(0, [6, 4])  # hits, in this order
    assert list(c.lru_order(0)) == [5, 6, 4]
    c.access(0, [7])
    assert 5 not in c.resident(0)


def test_pinned_hot_clusters_are_never_evicted():
    c = cache([[0, 9]], [2])
    rng = np.random.default_rng(0)
    for _ in range(200):
        c.access(0, rng.choice(np.arange(1, 9), size=3, replace=False))
        assert c.segment_of(0, 0) == "hot" and c.segment_of(0, 9) == "hot"
        assert len(c.resident(0)) <= 2 + 2  # budget: 2 hot + 2 LRU slots
    hits_before = c.stats.hot_hits
    assert c.access(0, [0, 9]) == (2, 0)
    assert c.stats.hot_hits == hits_before + 2 and c.stats.lru_hits >= 0


def test_the_current_calls_clusters_are_protected_and_overflow_bypasses():
    c = cache([[]], [2])
    c.access(0, [1, 2])
    look = c.lookup(0, np.array([1, 2, 3, 4]))
    assert look.n_hits == 2
    slots = c.admit(0, np.array([3, 4]))
    assert list(slots) == [-1, -1]  # 1 and 2 are in use by this call
    assert set(c.resident(0)) == {1, 2}
    assert c.stats.bypassed == 2


def test_layers_have_separate_lru_segments():
    c = cache([[], []], [1, 1])
    c.access(0, [5])
    c.access(1, [5])
    c.access(1, [6])  # evicts layer 1's 5 only
    assert c.segment_of(0, 5) == "lru" and c.segment_of(1, 5) is None


def test_slot_map_stays_consistent_under_random_traces():
    c = cache([[2], [7, 8]], [3, 4])
    rng = np.random.default_rng(1)
    for _ in range(300):
        layer = int(rng.integers(0, 2))
        c.access(layer, rng.choice(10, size=int(rng.integers(1, 5)), replace=False))
        for lay in range(2):
            slots = c.slot_of[lay][c.slot_of[lay] >= 0]
            assert len(set(slots.tolist())) == slots.size  # no slot held twice
            for unit in c.resident(lay):
                assert c.owner[c.slot_of[lay, unit]] == unit
    assert c.stats.lookups == c.stats.hot_hits + c.stats.lru_hits + c.stats.misses
    assert c.stats.misses == c.stats.admitted + c.stats.bypassed


def test_plan_respects_the_budget_and_picks_the_hottest():
    rng = np.random.default_rng(0)
    freq = rng.random((4, 50))
    plan = plan_segments(freq, 4, 50, capacity=60, hot_fraction=0.5)
    assert plan.n_slots <= 60 and plan.n_hot == 30
    chosen = np.zeros_like(freq, dtype=bool)
    for layer, ids in enumerate(plan.hot):
        chosen[layer, ids] = True
    assert freq[chosen].min() >= freq[~chosen].max()  # the model-wide top 30
    # every cluster fits: hot + LRU cover each layer exactly
    full = plan_segments(freq, 4, 50, capacity=200, hot_fraction=0.3)
    assert [h.size + n for h, n in zip(full.hot, full.lru, strict=True)] == [50] * 4
    # no profile: all LRU, split evenly
    none = plan_segments(None, 4, 50, capacity=41, hot_fraction=0.5)
    assert none.n_hot == 0 and sum(none.lru) == 41 and max(none.lru) - min(none.lru) <= 1
    with pytest.raises(ValueError, match="hot_fraction"):
        plan_segments(freq, 4, 50, 10, hot_fraction=1.5)


def test_plan_breaks_ties_to_the_lower_layer_and_id():
    """The hot set is a stable descending sort's first clusters: among equal frequencies
    the lower layer, then the lower id, wins."""
    freq = np.round(np.random.default_rng(1).random((3, 40)) * 4)  # many ties
    for capacity in (1, 7, 30, 61):
        plan = plan_segments(freq, 3, 40, capacity=capacity, hot_fraction=1.0)
        order = np.argsort(-freq.ravel(), kind="stable")[:capacity]
        expected = [np.sort(order[order // 40 == layer] % 40) for layer in range(3)]
        assert all(np.array_equal(h, e) for h, e in zip(plan.hot, expected, strict=True))


def test_preload_fills_free_slots_without_counting():
    c = cache([[0]], [2])
    units, slots = c.preload(0, np.array([0, 4, 5, 6]))  # 0 is hot already; 6 does not fit
    assert list(units) == [4, 5] and c.stats.lookups == 0
    assert list(c.lru_order(0)) == [5, 4]  # the first listed is the most recent
    c.access(0, [7])
    assert c.segment_of(0, 5) is None and c.segment_of(0, 4) == "lru"


def test_lookup_slots_on_a_hand_made_trace():
    """The engine's vectorised lookup: one slot per unit, -1 for misses, the count."""
    c = cache([[0]], [2])
    slots, n_miss = c.lookup_slots(0, np.array([0, 3, 4]))
    assert slots[0] == 0 and list(slots[1:]) == [-1, -1] and n_miss == 2
    assert list(c.admit(0, np.array([3, 4]))) == [1, 2]
    slots, n_miss = c.lookup_slots(0, np.array([0, 4]))
    assert list(slots) == [0, 2] and n_miss == 0
    slots, n_miss = c.lookup_slots(0, np.array([5]))
    assert list(slots) == [-1] and n_miss == 1
    assert list(c.admit(0, np.array([5]))) == [1]  # 3 was the least recently used
    s = c.stats
    assert (s.lookups, s.hot_hits, s.lru_hits, s.misses) == (6, 2, 1, 3)


class ReferenceLRU:
    """Per-neuron Python model of the policy: pinned hot set, an ordered LRU per layer,
    the current call's clusters never evicted, overflowing misses bypass."""

    def __init__(self, hot: list[list[int]], lru: list[int]) -> None:
        self.hot = [set(h) for h in hot]
        self.cap = lru
        self.order: list[list[int]] = [[] for _ in lru]  # least recent first

    def call(self, layer: int, units: list[int]) -> tuple[list[bool], int]:
        order, hits = self.order[layer], []
        for u in units:
            hits.append(u in self.hot[layer] or u in order)
            if u in order:  # stamped most recent, in the order given
                order.remove(u)
                order.append(u)
        bypassed = 0
        for u, hit in zip(units, hits, strict=True):
            if hit:
                continue
            if len(order) < self.cap[layer]:
                order.append(u)
                continue
            victims = [v for v in order if v not in units]
            if not victims:
                bypassed += 1
                continue
            order.remove(victims[0])
            order.append(u)
        return hits, bypassed


def test_vectorised_lookup_and_admit_match_a_per_neuron_reference():
    hot, lru = [[2], [7, 8]], [3, 4]
    c, ref = cache(hot, lru), ReferenceLRU(hot, lru)
    rng = np.random.default_rng(5)
    for _ in range(400):
        layer = int(rng.integers(0, 2))
        units = np.sort(rng.choice(10, size=int(rng.integers(1, 7)), replace=False))
        bypassed = c.stats.bypassed
        slots, n_miss = c.lookup_slots(layer, units)
        miss = units[slots < 0]
        c.admit(layer, miss)
        want, want_bypassed = ref.call(layer, units.tolist())
        assert (slots >= 0).tolist() == want and n_miss == miss.size
        assert c.stats.bypassed - bypassed == want_bypassed
        assert set(c.resident(layer).tolist()) == set(ref.order[layer]) | set(hot[layer])
