"""The compiled per-call planner, the lookahead reads and the io_uring engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powerbench.flash import plan as flash_plan
from powerbench.solver.neuron_cache import SegmentedNeuronCache, plan_segments
from tests.flash.conftest import TrueMask
from tests.flash.test_flash_ffn import flash, fp16_weights, run_both

needs_planner = pytest.mark.skipif(flash_plan.load() is None, reason="no C++ compiler")


def _caches(seed: int = 0):
    rng = np.random.default_rng(seed)
    freq = rng.random((3, 64))
    plan = plan_segments(freq, 3, 64, 70, hot_fraction=0.4)
    return SegmentedNeuronCache(plan, 64), SegmentedNeuronCache(plan, 64), rng


@needs_planner
@pytest.mark.parametrize("cn", [1, 4])
def test_the_compiled_plan_is_the_numpy_policy(cn):
    """Same hits, misses, admissions and evictions as lookup_slots + admit, call by call,
    and every neuron's row in the slot that holds (or now receives) its cluster."""
    a, b, rng = _caches()
    b1 = [rng.random(64 * cn).astype(np.float32) for _ in range(3)]
    arena_b1 = np.zeros((a.n_slots + 64) * cn, dtype=np.float32)
    p = flash_plan.LayerPlanner(flash_plan.load(), b, cn, 64 * cn, a.n_slots, b1, arena_b1)
    for step in range(60):
        layer = step % 3
        ids = np.sort(rng.choice(64 * cn, size=int(rng.integers(1, 40)), replace=False))
        units = np.unique(ids // cn)
        slots, n_miss = a.lookup_slots(layer, units)
        miss = units[slots < 0]
        new = a.admit(layer, miss)
        got_miss, n = p.plan(layer, ids.astype(np.int64))
        assert got_miss == n_miss
        assert np.array_equal(p.miss_units[:n_miss], miss)
        assert np.array_equal(p.miss_slots[:n_miss] >= a.n_slots, new < 0)  # spilled alike
        assert np.array_equal(a.slot_of >= 0, b.slot_of >= 0)  # the same clusters resident
        assert (a.tick, a._call_start) == (b.tick, b._call_start)
        rows = p.rows[:n]
        slot = np.where(b.slot_of[layer][ids // cn] >= 0, b.slot_of[layer][ids // cn], -1)
        spilled = ~p.resident[:n] & (slot < 0)
        assert np.array_equal(rows[~spilled], (slot * cn + ids % cn)[~spilled])
        assert np.array_equal(p.resident[:n], np.isin(ids // cn, units[slots >= 0]))
        ms, mu = p.miss_slots[:n_miss], p.miss_units[:n_miss]
        got = arena_b1[(ms[:, None] * cn + np.arange(cn)).ravel()]
        assert np.array_equal(got, b1[layer][(mu[:, None] * cn + np.arange(cn)).ravel()])
    p.flush_counts()
    assert a.stats == b.stats
    _assert_lru_lists(p, b)


def _assert_lru_lists(p, cache):
    """Each layer's linked list holds its LRU slots ordered by (last_used, slot)."""
    for layer, (lo, hi) in enumerate(cache.lru_range):
        order, s = [], p.lru_head[layer]
        while s >= 0:
            order.append(int(s))
            s = p.lru_next[s]
        want = lo + np.lexsort((np.arange(hi - lo), cache.last_used[lo:hi]))
        assert order == want.tolist()
        assert p.lru_tail[layer] == (want[-1] if want.size else -1)


@needs_planner
def test_the_lookahead_admission_is_the_numpy_policy():
    """`LayerPlanner.admit` (a lookahead's reads) admits what numpy's admit admits, and
    the lists stay ordered after planning and admitting in turn."""
    a, b, rng = _caches(1)
    p = flash_plan.LayerPlanner(flash_plan.load(), b, 1, 64, a.n_slots, None, None)
    for step in range(40):
        layer = step % 3
        ids = np.sort(rng.choice(64, size=int(rng.integers(1, 30)), replace=False))
        miss = ids[a.lookup_slots(layer, ids)[0] < 0]
        a.admit(layer, miss)
        p.plan(layer, ids.astype(np.int64))
        nxt = (layer + 1) % 3
        ahead = np.sort(rng.choice(64, size=8, replace=False))
        ahead = ahead[a.slot_of[nxt][ahead] < 0]
        # the same clusters get slots (which free slot, among equally old ones, may differ)
        assert np.array_equal(a.admit(nxt, ahead, count=False) >= 0, p.admit(nxt, ahead) >= 0)
        assert np.array_equal(a.slot_of >= 0, b.slot_of >= 0) and a.tick == b.tick
    _assert_lru_lists(p, b)


@needs_planner
def test_the_planner_takes_unsorted_ids_and_refuses_nothing(tmp_path, opt_weights):
    class Shuffled(TrueMask):
        def predict(self, layer_idx, x):
            ids = super().predict(layer_idx, x)
            return ids.flip(0)

    ffn = flash(opt_weights, tmp_path, predictors=Shuffled(opt_weights),
                dram_budget_fraction=0.3, cluster_neurons=4)
    assert ffn.pipeline.planner is not None
    run_both(opt_weights, ffn, rows=2)


class Lookahead(TrueMask):
    """TrueMask with a lookahead: the next layer's exact set computed from this layer's
    input (a bad guess: another layer's input), every other neuron dropped, plus a few
    false positives."""

    def lookahead(self, layer_idx, x):
        if layer_idx >= self.weights.n_layers:
            return None
        ids = self.predict(layer_idx, x)[::2]
        extra = torch.arange(0, self.weights.layers[0].ffn.d_ffn, 97)
        return torch.unique(torch.cat([ids, extra]))


def lookahead_flash(weights, tmp_path, io_engine: str = "aio", **kw):
    """A lookahead FlashFFN of real-size fp16 rows read with O_DIRECT (skips without it)."""
    ffn = flash(weights, tmp_path, backend="sparse_cpu", io_engine=io_engine,
                predictors=Lookahead(weights), dram_budget_fraction=0.25, lookahead=True, **kw)
    if not ffn.reader.direct:
        pytest.skip("no O_DIRECT here")
    return ffn


@pytest.mark.parametrize("submit_thread", [False, True])
def test_lookahead_reads_keep_the_outputs(tmp_path, submit_thread):
    weights = fp16_weights()
    ffn = lookahead_flash(weights, tmp_path, io_submit_thread=submit_thread)
    run_both(weights, ffn, steps=4)
    m = ffn.metrics()
    assert m["flash_prefetched"] > 0 and 0 < m["flash_prefetch_used"] <= m["flash_prefetched"]
    ffn.close()


class HeldAhead:
    """The lookahead reads, held in flight until someone waits for them (`finished` stays
    False after a submission): what a slow read looks like to the pipeline."""

    def __init__(self, reads) -> None:
        self.reads, self.held = reads, False

    def __getattr__(self, name):
        return getattr(self.reads, name)

    @property
    def finished(self) -> bool:
        return not self.held

    def submit(self, *args) -> None:
        self.reads.submit(*args)
        self.held = True

    def wait(self) -> None:
        self.reads.wait()
        self.held = False


@pytest.mark.parametrize("planned", [True, False])
def test_no_admission_while_its_layers_lookahead_is_in_flight(tmp_path, planned):
    """An admission may evict a slot a lookahead read went into (a false positive of the
    guess); a demand read into it while that read is in flight races it (seen as wrong
    outputs with io_uring). So a call waits for its layer's lookahead batch first."""
    weights = fp16_weights()
    ffn = lookahead_flash(weights, tmp_path, compiled_plan=planned)
    pipe = ffn.pipeline
    assert (pipe.planner is not None) == planned
    pipe.ahead = HeldAhead(pipe.ahead)
    raced = []
    owner = pipe.planner if planned else pipe.cache
    name = "step" if planned else "admit"
    admit = getattr(owner, name)

    def checked(layer, *args, **kw):
        raced.append(pipe._ahead_layer == layer and not pipe.ahead.finished)
        return admit(layer, *args, **kw)

    setattr(owner, name, checked)
    run_both(weights, ffn, steps=3)
    assert ffn.metrics()["flash_prefetched"] > 0
    assert raced and not any(raced)
    ffn.close()


def test_lookahead_needs_a_lookahead_predictor(tmp_path):
    weights = fp16_weights()
    with pytest.raises(ValueError, match="lookahead"):
        flash(weights, tmp_path, io_engine="aio", dram_budget_fraction=0.25, lookahead=True)


def test_io_uring_reads_equal_sparse_ffn(tmp_path):
    from powerbench.flash import uring

    if not uring.available():
        pytest.skip("io_uring with a submission thread is not allowed here")
    weights = fp16_weights()
    ffn = lookahead_flash(weights, tmp_path, io_engine="uring")
    assert ffn.reader.engine == "uring"
    run_both(weights, ffn, steps=4)
    m = ffn.metrics()
    assert m["flash_reads"] > 0 and m["flash_prefetched"] > 0
    ffn.close()


def test_trace_lookahead_stand_in_has_its_recall():
    from powerbench.measure.flash_ffn_bench import BenchShape, synthetic_profile_for
    from powerbench.profiling.active_traces import TraceActiveSets

    shape = BenchShape(n_layers=3, d_model=64, d_ffn=2048)
    sets = TraceActiveSets(synthetic_profile_for(shape, 40))
    view = sets.with_lookahead(0.5)
    assert view.lookahead(1, None) is not None and sets.lookahead(1, None) is sets.sets[1][0]
    hit = tot = pred = 0
    for t in range(40):
        sets.seek(t)
        for layer in range(3):
            true = set(sets.sets[layer][t].tolist())
            got = set(view.lookahead(layer, None).tolist())
            hit, tot, pred = hit + len(true & got), tot + len(true), pred + len(got)
    assert 0.4 < hit / tot < 0.6 and 0.4 < hit / pred < 0.6
    assert view.lookahead(3, None) is None
