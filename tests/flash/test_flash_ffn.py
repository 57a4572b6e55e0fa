"""FlashFFN computes what the in-DRAM SparseFFN computes, from a file and a small cache."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from powerbench.engine.decoder import Decoder
from powerbench.engine.ffn import DenseFFN
from powerbench.engine.sparse import SparseFFN
from powerbench.flash.ffn import FlashFFN
from powerbench.flash.layout import ALIGN
from tests.flash.conftest import TrueMask, make_opt_weights


class FakeProfile:
    """What FlashFFN reads from an ActivationProfile: per-layer neuron frequencies."""

    def __init__(self, n_layers: int, d_ffn: int, seed: int = 0) -> None:
        self.freq = np.random.default_rng(seed).random((n_layers, d_ffn))

    def frequencies(self) -> np.ndarray:
        return self.freq


def flash(weights, tmp_path, **kw):
    kw.setdefault("backend", "sparse_torch")
    kw.setdefault("profile", FakeProfile(weights.n_layers, weights.layers[0].ffn.d_ffn))
    return FlashFFN(weights, predictors=kw.pop("predictors", TrueMask(weights)),
                    cache_dir=str(tmp_path), **kw)


def run_both(weights, ffn, steps: int = 6, rows: int = 1, seed: int = 0):
    ref = SparseFFN(weights, backend=ffn.backend, predictors=TrueMask(weights), fused=False)
    g = torch.Generator().manual_seed(seed)
    # another summation order: a few fp32 ulps, or one fp16 ulp of the output
    tol = 1e-3 if weights.dtype == torch.float16 else 1e-5
    for _ in range(steps):
        x = torch.randn(rows, weights.d_model, generator=g).to(weights.dtype)
        for layer in range(weights.n_layers):
            a, b = ref(layer, x), ffn(layer, x)
            assert b.dtype == a.dtype and b.shape == a.shape
            torch.testing.assert_close(b, a, rtol=10 * tol, atol=tol)


@pytest.mark.parametrize("bundled", [True, False])
@pytest.mark.parametrize("pipeline", [True, False])
@pytest.mark.parametrize("budget", [0.0, 0.3, 1.0])
def test_relu_opt_equals_sparse_ffn(opt_weights, tmp_path, bundled, pipeline, budget):
    ffn = flash(opt_weights, tmp_path, bundled=bundled, pipeline=pipeline,
                dram_budget_fraction=budget, cluster_neurons=4)
    assert not ffn.pipeline.zero_copy  # 128-byte rows: O_DIRECT goes through staging
    run_both(opt_weights, ffn, rows=2)
    m = ffn.metrics()
    if budget == 1.0:  # everything resident after the warm start: nothing read
        assert m["flash_hit_rate"] == 1.0 and m["flash_bytes_read_per_token"] == 0
    else:
        assert m["flash_bytes_read_per_token"] > 0 and m["flash_hit_rate"] < 1.0
    ffn.close()


@pytest.mark.parametrize("bundled", [True, False])
def test_buffered_reads_go_straight_into_the_arena(opt_weights, tmp_path, bundled):
    ffn = flash(opt_weights, tmp_path, direct=False, bundled=bundled, cluster_neurons=3,
                io_engine="auto",
                dram_budget_fraction=0.3)
    assert not ffn.reader.direct and ffn.pipeline.zero_copy
    assert ffn.reader.engine == "threads"  # auto: native AIO would block without O_DIRECT
    run_both(opt_weights, ffn, rows=2)
    assert ffn.metrics()["flash_direct_io"] == 0.0


@pytest.mark.parametrize("model", ["reglu_weights", "swiglu_weights"])
def test_gated_equals_sparse_ffn(request, tmp_path, model):
    weights = request.getfixturevalue(model)
    ffn = flash(weights, tmp_path, dram_budget_fraction=0.4, bundled=model == "reglu_weights")
    run_both(weights, ffn)
    assert ffn.metrics()["flash_bytes_read_per_token"] > 0


def fp16_weights():
    """d_model 2048 in fp16: one 4 KB row per matrix, one neuron per cluster (real sizes)."""
    from dataclasses import replace

    weights = make_opt_weights(d_model=2048, d_ffn=64, layers=2, seed=3)
    return replace(weights, embed=weights.embed.half(), layers=[replace(layer, ffn=replace(
        layer.ffn, w1=layer.ffn.w1.half(), w2=layer.ffn.w2.half(), w2_t=layer.ffn.w2_t.half(),
        b1=layer.ffn.b1.half(), b2=layer.ffn.b2.half())) for layer in weights.layers])


@pytest.mark.parametrize("backend", ["sparse_cpu", "sparse_torch"])
def test_fp16_page_aligned_rows_on_the_compiled_backend(tmp_path, backend):
    weights = fp16_weights()
    ffn = flash(weights, tmp_path, backend=backend, dram_budget_fraction=0.25)
    assert ffn.geometry.cluster_neurons == 1 and ffn.geometry.cluster_bytes == 2 * ALIGN
    assert ffn.pipeline.zero_copy  # O_DIRECT reads straight into the arena's 4 KB rows
    run_both(weights, ffn, steps=4)


def test_cache_behaviour_shows_in_metrics(opt_weights, tmp_path):
    ffn = flash(opt_weights, tmp_path, dram_budget_fraction=0.5, hot_fraction=0.5,
                cluster_neurons=4)
    assert ffn.cache.n_hot > 0 and ffn.metrics()["flash_hot_share"] == pytest.approx(0.5, 0.1)
    budget = 0.5 * opt_weights.n_layers * 96 * 2 * 32 * 4
    assert ffn.metrics()["flash_cache_gb"] * 1e9 <= budget  # the budget is respected
    run_both(opt_weights, ffn, steps=4)
    m = ffn.metrics()
    assert m["flash_hit_rate_hot"] > 0 and m["flash_reads"] > 0
    assert m["flash_hit_rate"] == pytest.approx(m["flash_hit_rate_hot"] + m["flash_hit_rate_lru"])
    assert m["flash_direct_io"] == 1.0  # ext4/tmpfs here take O_DIRECT
    assert 0 < m["sparse_computed_fraction"] < 1
    ffn.rewind()  # a new generation: counters restart, the cache stays warm
    assert ffn.metrics()["flash_reads"] == 0 and ffn.cache.resident(0).size > 0


def test_whole_decoder_with_prompt_and_decode(opt_weights, tmp_path):
    ids = torch.randint(0, 97, (1, 12))
    dense = Decoder(opt_weights, ffn=DenseFFN(opt_weights)).generate(ids, 5, return_logits=True)
    ffn = flash(opt_weights, tmp_path, dram_budget_fraction=0.2, dense_from_rows=8)
    out = Decoder(opt_weights, ffn=ffn).generate(ids, 5, return_logits=True)
    assert torch.equal(out.tokens, dense.tokens)  # a true mask loses nothing
    torch.testing.assert_close(out.logits, dense.logits, rtol=1e-4, atol=1e-4)
    assert ffn.metrics()["flash_prompt_bytes_read"] > 0  # the prompt's sweep came from the file


def test_a_prompt_reads_into_scratch_and_leaves_the_cache_alone(opt_weights, tmp_path):
    ffn = flash(opt_weights, tmp_path, dram_budget_fraction=0.2, dense_from_rows=8,
                cluster_neurons=4)
    before = [ffn.cache.resident(layer).copy() for layer in range(opt_weights.n_layers)]
    x = torch.randn(8, opt_weights.d_model)
    torch.testing.assert_close(ffn(0, x), DenseFFN(opt_weights)(0, x), rtol=1e-4, atol=1e-5)
    m = ffn.metrics()
    assert m["flash_prompt_bytes_read"] == (96 // 4 - before[0].size) * ffn.geometry.cluster_bytes
    assert ffn.cache.stats.lookups == 0 and m["flash_bytes_read_per_token"] == 0
    assert all(np.array_equal(ffn.cache.resident(layer), b) for layer, b in enumerate(before))


def test_missed_neurons_change_the_output(opt_weights, tmp_path):
    ffn = flash(opt_weights, tmp_path, predictors=TrueMask(opt_weights, drop=5))
    x = torch.randn(1, opt_weights.d_model)
    assert not torch.allclose(ffn(0, x), DenseFFN(opt_weights)(0, x), atol=1e-5)


def test_a_broken_file_is_rebuilt(opt_weights, tmp_path):
    ffn = flash(opt_weights, tmp_path)
    path, size = ffn.path, ffn.path.stat().st_size
    assert ffn.rebuilt
    ffn.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = flash(opt_weights, tmp_path)
    assert not again.rebuilt
    again.close()
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    with pytest.warns(RuntimeWarning, match="rebuilt: .*truncated"):
        fixed = flash(opt_weights, tmp_path)
    assert fixed.rebuilt and path.stat().st_size == size
    run_both(opt_weights, fixed, steps=2)
    path.write_bytes(b"\x00" * 100)
    with pytest.warns(RuntimeWarning, match="rebuilt: .*bad magic"):
        flash(opt_weights, tmp_path)


def test_needs_a_predictor_and_a_budget(opt_weights, tmp_path):
    with pytest.raises(ValueError, match="predictor"):
        FlashFFN(opt_weights, predictors=None, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="dram_budget_fraction"):
        flash(opt_weights, tmp_path, dram_budget_fraction=1.5)
    with pytest.warns(RuntimeWarning, match="no ActivationProfile"):
        ffn = flash(opt_weights, tmp_path, profile=None)
    assert ffn.cache.n_hot == 0


def test_budget_in_gb(opt_weights, tmp_path):
    g_bytes = 96 * 2 * 32 * 4  # one layer's FFN in fp32
    ffn = flash(opt_weights, tmp_path, dram_budget_gb=g_bytes / 1e9, dram_budget_fraction=None,
                cluster_neurons=4)
    assert ffn.cache.n_slots == 96 // 4


@pytest.mark.parametrize("engine", ["threads", "aio"])
def test_both_io_engines_equal_sparse_ffn(opt_weights, tmp_path, engine):
    ffn = flash(opt_weights, tmp_path, io_engine=engine, io_threads=3, dram_budget_fraction=0.3)
    assert ffn.reader.engine == engine and ffn.metrics()["flash_aio"] == (engine == "aio")
    run_both(opt_weights, ffn, rows=2)
    assert ffn.metrics()["flash_reads"] > 0


def test_the_direct_bundled_plan_is_the_generic_one(tmp_path):
    from powerbench.flash.read_plan import bundled_plan, plan_reads

    ffn = flash(fp16_weights(), tmp_path, dram_budget_fraction=0.25)
    clusters, slots = np.array([3, 9, 40]), np.array([7, 0, 12])
    base = ffn.header.layer_offsets[1]
    fast = bundled_plan(ffn.geometry, base, clusters, ffn.pipeline.arena.rows(slots))
    offs, lens, bufs, dests = ffn.geometry.row_extents(base, clusters, slots)
    slow = plan_reads(offs, lens, dests, buffers=bufs)
    for name in fast.__dataclass_fields__:
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name


@pytest.mark.parametrize(("cluster_neurons", "submit_thread"), [(1, False), (2, False),
                                                                 (1, True)])
def test_aio_scatter_reads_equal_sparse_ffn(tmp_path, cluster_neurons, submit_thread):
    """Real-size rows with native AIO: misses go through the preallocated iocbs
    (`ScatterReads`), one read per cluster, straight into the arena rows (submitted by
    the caller or by a pool worker)."""
    weights = fp16_weights()
    threads = torch.get_num_threads()
    ffn = flash(weights, tmp_path, backend="sparse_cpu", io_engine="aio",
                dram_budget_fraction=0.25, cluster_neurons=cluster_neurons,
                io_submit_thread=submit_thread, compute_threads=1 if submit_thread else None)
    if not ffn.reader.direct:
        pytest.skip("no O_DIRECT here: reads go through a staging copy")
    assert ffn.pipeline.scatter is not None
    planned = []  # batches the compiled planner submitted itself (not from a pool worker)
    submitted = ffn.reader.submitted_scatter
    ffn.reader.submitted_scatter = lambda *a: planned.append(a[1]) or submitted(*a)
    run_both(weights, ffn, steps=4)
    assert all(n > 0 for n in planned)
    if cluster_neurons == 1:  # (larger clusters: these misses hold neighbours, coalesced)
        assert bool(planned) != submit_thread
    assert torch.get_num_threads() == threads  # compute_threads is restored after each call
    m = ffn.metrics()
    assert m["flash_reads"] > 0 and m["flash_bytes_read_per_token"] > 0
    assert ffn.reader.stats.bytes_read == ffn.cache.stats.misses * ffn.geometry.cluster_bytes
    # clusters not adjacent in the file take the preallocated batch, one read each
    from powerbench.flash.aio import ScatterReads

    before = ffn.reader.stats.reads
    pending = ffn.pipeline._read_submit(1, np.array([1, 5, 9]), np.array([0, 1, 2]))
    assert isinstance(pending.batch, ScatterReads)
    pending.wait()
    assert ffn.reader.stats.reads - before == 3
    g = ffn.geometry
    for slot, cluster in enumerate([1, 5, 9]):  # the arena rows hold the file's rows
        rows = ffn.pipeline.arena.rows(np.array([slot]))
        for part in range(g.n_parts):
            with open(ffn.path, "rb") as f:
                f.seek(ffn.header.layer_offsets[1] + cluster * g.cluster_bytes)
                raw = np.frombuffer(f.read(g.cluster_bytes), dtype=np.uint8)
            want = raw.reshape(cluster_neurons, g.n_parts, g.row_bytes)[:, part].ravel()
            assert np.array_equal(ffn.pipeline.arena.parts_np[part][rows].ravel(), want)
