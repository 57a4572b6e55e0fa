"""The phone flash tier on hand-made traces: pinned hits are free, cold misses cost reads,
LRU behaviour, bundling (1 read vs 3), the single command queue, MoE routing."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.hardware.flash_rates import KB, FlashRates
from powerbench.simulator.config import ComputeMode
from powerbench.simulator.flash_tier import (
    _cluster_ids,
    first_read_seconds,
    flash_seconds,
    mmap_bandwidth,
    replay,
)
from powerbench.simulator.page_cache import PageCacheLRU
from powerbench.simulator.phone import computed_masks
from powerbench.solver.flash_plan import FlashPlan, FlashPolicy
from powerbench.solver.neuron_cache import SegmentPlan
from tests.simulator.factories import make_profile, make_spec

RATES = FlashRates(seq_4k=0.45e9, seq_512k=4e9, rand_512k=3.5e9,
                   rand_4k_core={"big": 1.076e9, "mid": 1.008e9, "little": 0.762e9},
                   concurrent_issue_loss=0.4)


def plan(hot: list[int], lru: int, reads: int = 1, issuers: int = 1) -> FlashPlan:
    seg = SegmentPlan(hot=(np.array(hot, dtype=np.int64),), lru=(lru,))
    return FlashPlan(FlashPolicy.segmented, 1, seg, neuron_bytes=6 * KB,
                     reads_per_neuron=reads, io_cores=issuers)


def steps(*active: list[int], n: int = 8) -> list[np.ndarray]:
    m = np.zeros((len(active), n), dtype=bool)
    for s, ids in enumerate(active):
        m[s, ids] = True
    return [m]


def test_pinned_hits_cost_nothing_cold_misses_cost_reads():
    t = replay(plan(hot=[0, 1], lru=0), steps([0, 1], [0, 1, 5]))
    assert t.bytes[:, 0].tolist() == [0.0, 6 * KB]
    assert t.reads[:, 0].tolist() == [0.0, 1.0]
    assert t.hot_hits.sum() == 4 and t.lru_hits.sum() == 0
    assert flash_seconds(plan([0, 1], 0), t, RATES)[0, 0] == 0.0


def test_lru_keeps_recent_and_evicts_least_recently_used():
    # two LRU slots: 2, 3 cached; 2 touched again; 4 evicts 3 (least recent); 3 misses again
    t = replay(plan(hot=[], lru=2), steps([2], [3], [2], [4], [2], [3]))
    assert t.reads[:, 0].tolist() == [1, 1, 0, 1, 0, 1]
    assert t.lru_hits[:, 0].tolist() == [0, 0, 1, 0, 1, 0]


def test_bundling_one_read_vs_three():
    trace = steps([3, 4])
    one = replay(plan([], 0, reads=1), trace)
    three = replay(plan([], 0, reads=3), trace)
    assert one.reads.sum() == 2 and three.reads.sum() == 6
    assert one.bytes.sum() == three.bytes.sum()  # the same bytes ...
    t1 = flash_seconds(plan([], 0, reads=1), one, RATES).sum()
    t3 = flash_seconds(plan([], 0, reads=3), three, RATES).sum()
    # ... but 2 KB reads cost a whole 4 KB read each: 3 x 4 KB / 1.076 vs 6 KB at > 1.076
    assert t3 == pytest.approx(6 * 4 * KB / 1.076e9)
    assert t1 < t3 / 2


def test_single_queue_loses_bandwidth_with_several_issuers():
    assert RATES.queue_factor(1) == 1.0
    assert RATES.queue_factor(2) == pytest.approx(0.8)
    assert RATES.queue_factor(1000) == pytest.approx(0.6, abs=1e-3)  # up to 40% lost
    t = replay(plan([], 0), steps([1, 2, 3]))
    solo = flash_seconds(plan([], 0, issuers=1), t, RATES).sum()
    four = flash_seconds(plan([], 0, issuers=4), t, RATES).sum()
    assert four == pytest.approx(solo / 0.7)


def test_bandwidth_by_block_size_and_core():
    assert RATES.bandwidth(4 * KB, core="little") == pytest.approx(0.762e9)
    assert RATES.bandwidth(512 * KB) == pytest.approx(3.5e9)
    assert RATES.bandwidth(2048 * KB, random=False) == pytest.approx(4e9)
    assert RATES.bandwidth(4 * KB) < RATES.bandwidth(64 * KB) < RATES.bandwidth(512 * KB)
    with pytest.raises(ValueError, match="core class"):
        RATES.bandwidth(4 * KB, core="huge")


def _mmap(capacity: int, per_block: int = 1) -> FlashPlan:
    seg = SegmentPlan(hot=(np.arange(0),), lru=(0,))
    return FlashPlan(FlashPolicy.mmap, per_block, seg, neuron_bytes=6 * KB,
                     block_bytes=128 * KB, page_cache_units=capacity)


def test_mmap_lru_page_cache_thrashes_under_a_dense_cyclic_scan():
    """8 blocks scanned every token through an LRU of 4: each access evicts the block
    needed next, so every token reads all 8 (the old fixed-resident model read 4)."""
    dense = np.ones((3, 8), dtype=bool)
    t = replay(_mmap(4), [dense], warm=[np.ones((2, 8), dtype=bool)])
    assert t.bytes[:, 0].tolist() == [8 * 6 * KB] * 3
    assert t.hit_rates()["hit"] == 0.0
    fits = replay(_mmap(8), [dense], warm=[np.ones((1, 8), dtype=bool)])
    assert fits.bytes.sum() == 0.0 and fits.hit_rates()["hit"] == 1.0


def test_mmap_page_cache_keeps_a_reused_working_set_and_counts_the_prompt_pass():
    steps = np.zeros((4, 8), dtype=bool)
    steps[:, :2] = True  # a token touches blocks 0, 1 only (2 neurons per block: block 0)
    prompt = [np.ones(8, dtype=bool)]
    t = replay(_mmap(2, per_block=2), [steps], prefill=prompt)
    assert t.prefill_bytes.tolist() == [8 * 6 * KB]  # 4 blocks of 2 neurons, all paged in
    # after the prompt the cache holds blocks 2, 3: the first token misses block 0, then hits
    assert t.bytes[:, 0].tolist() == [2 * 6 * KB, 0.0, 0.0, 0.0]


def test_page_cache_lru_is_exact_lru():
    cache = PageCacheLRU(n_blocks=6, capacity=3)
    assert cache.access(np.array([0, 1, 2])) == 3
    assert cache.access(np.array([0])) == 0  # 0 is now the most recent: 1 is the LRU
    assert cache.access(np.array([3])) == 1  # evicts 1
    assert cache.cached.tolist() == [True, False, True, True, False, False]
    assert cache.access(np.array([1, 4])) == 2  # evicts 2 then 0
    assert cache.cached.tolist() == [False, True, False, True, True, False]
    for _ in range(2000):  # long runs compact the log and stay exact
        cache.access(np.array([5, 4]))
    assert cache.cached.tolist() == [False, True, False, False, True, True]
    assert PageCacheLRU(4, 0).access(np.array([0, 1])) == 2


def test_segmented_prompt_pass_reads_what_is_not_resident_without_admitting():
    seg = SegmentPlan(hot=(np.array([0, 1]),), lru=(0,))
    p = FlashPlan(FlashPolicy.segmented, 1, seg, neuron_bytes=6 * KB)
    t = replay(p, steps([0, 1]), prefill=[np.ones(8, dtype=bool)])
    assert t.prefill_bytes.tolist() == [6 * 6 * KB]
    assert t.bytes.sum() == 0.0


def test_moe_dense_computes_and_reads_only_routed_experts():
    spec = make_spec(d_ffn=4)
    spec = type(spec)(**{**vars(spec), "n_experts": 2, "experts_per_token": 1})
    masks = np.zeros((2, 8), dtype=bool)
    masks[0, 1] = True  # token 0 routed to expert 0
    masks[1, 6] = True  # token 1 routed to expert 1
    profile = make_profile(spec, [masks])
    groups = np.array([[0], [1]])
    dense = computed_masks(spec, profile, ComputeMode.dense, groups)[0]
    assert dense[0].tolist() == [True] * 4 + [False] * 4
    assert dense[1].tolist() == [False] * 4 + [True] * 4
    sparse = computed_masks(spec, profile, ComputeMode.sparse, groups)[0]
    assert sparse.sum() == 2
    t = replay(_mmap(0), [dense])
    assert t.bytes[:, 0].tolist() == [4 * 6 * KB, 4 * 6 * KB]  # one expert each, not both


def test_mmap_page_faults_are_synchronous_random_reads_sharing_the_queue():
    """llama.cpp's misses: one 128 KB random read per window on each of n faulting
    threads (one command queue: 1 - 0.4 (1 - 1/n) of the bandwidth), plus the kernel
    time per window spread over the threads; slower than the old sequential charge."""
    seg = SegmentPlan(hot=(np.arange(0),), lru=(0,))
    base = dict(cluster_neurons=1, segments=seg, neuron_bytes=128 * KB, block_bytes=128 * KB)
    one = FlashPlan(FlashPolicy.mmap, io_core="mid", io_cores=1, **base)
    six = FlashPlan(FlashPolicy.mmap, io_core="mid", io_cores=6, fault_s=6e-6, **base)
    rand = RATES.bandwidth(128 * KB, random=True, core="mid")
    assert mmap_bandwidth(one, RATES) == pytest.approx(rand)
    window = 128 * KB / (rand * (1 - 0.4 * 5 / 6)) + 6e-6 / 6
    assert mmap_bandwidth(six, RATES) == pytest.approx(128 * KB / window)
    assert mmap_bandwidth(six, RATES) < RATES.bandwidth(128 * KB, random=False, core="mid")
    t = replay(FlashPlan(FlashPolicy.mmap, io_core="mid", io_cores=6, fault_s=6e-6,
                         page_cache_units=0, **base), [np.ones((1, 4), dtype=bool)])
    assert flash_seconds(six, t, RATES)[0, 0] == pytest.approx(4 * window)
    assert first_read_seconds(six, RATES) == pytest.approx(128 * KB / rand + 6e-6)


def test_sliding_window_keeps_the_last_k_tokens_neurons_only():
    # window 2, room for 8: token 3 re-uses 0 (used by token 1, inside the window) and 1
    # (last used by token 0, two tokens back: dropped); 7 is read again after 2 idle tokens
    t = replay(plan(hot=[], lru=8), steps([0, 1], [0, 2], [3], [0, 1], [7], [5], [6], [7]),
               window=2)
    assert t.reads[:, 0].tolist() == [2, 1, 1, 1, 1, 1, 1, 1]
    assert t.lru_hits[:, 0].tolist() == [0, 1, 0, 1, 0, 0, 0, 0]


def test_sliding_window_over_capacity_drops_the_oldest_first():
    # window 3 but room for 2 neurons: after tokens [1], [2], [3] only 2 and 3 stay
    t = replay(plan(hot=[], lru=2), steps([1], [2], [3], [1, 2, 3]), window=3)
    assert t.reads[:, 0].tolist() == [1, 1, 1, 1]
    assert t.lru_hits[:, 0].tolist() == [0, 0, 0, 2]


def test_sliding_window_prompt_pass_and_prompt_tokens_fill_the_window():
    prefill = [np.ones(8, dtype=bool)]
    prompt = steps([4], [5], n=8)  # the prompt's last two tokens, per token
    t = replay(plan(hot=[], lru=8), steps([4, 5, 6]), warm=steps([6]), prefill=prefill,
               window=2, prompt_tokens=prompt)
    assert t.prefill_bytes.tolist() == [7 * 6 * KB]  # all but 6 (the warm token's)
    assert t.reads[:, 0].tolist() == [1]  # 4, 5 in the window; 6 left it


@pytest.mark.parametrize("cluster", [1, 3, 8])
def test_cluster_ids_are_the_distinct_clusters_of_the_active_neurons(cluster):
    rng = np.random.default_rng(cluster)
    for density in (0.0, 0.05, 0.5, 1.0):
        mask = rng.random(101) < density
        assert np.array_equal(_cluster_ids(mask, cluster),
                              np.unique(np.flatnonzero(mask) // cluster))
