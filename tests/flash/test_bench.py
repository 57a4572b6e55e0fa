"""The flash benchmark runs end to end on a tiny shape, and O_DIRECT keeps the weight file
out of the page cache while buffered reads put it there."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from powerbench.config import group_config
from powerbench.engine.synthetic import synthetic_spec
from powerbench.measure.flash_ffn_bench import run_flash_bench
from powerbench.measure.flash_ffn_inputs import BenchShape
from powerbench.measure.flash_ffn_report import Variant
from powerbench.measure.page_cache_usage import page_cache_bytes


def test_page_cache_probe(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(np.random.default_rng(0).bytes(1 << 20))
    with open(path, "rb") as f:
        f.read()
    assert page_cache_bytes(path) > 0
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    assert page_cache_bytes(path) < 1 << 20


def test_bench_runs_and_o_direct_bypasses_the_page_cache(tmp_path):
    shape = BenchShape(name="tiny", n_layers=2, d_model=1024, d_ffn=512, dtype="fp16",
                       token_sparsity=0.9)
    variants = [Variant("dram", None), Variant("flash 25%", 0.25),
                Variant("flash 25% unbundled", 0.25, bundled=False)]
    report = run_flash_bench(shape, variants, tokens=3, rounds=2, warmup=2, io_threads=2,
                             cache_dir=tmp_path, storage_mb=4, storage_seconds=0.02,
                             decode_spec=synthetic_spec(group_config(
                                 "model", "opt_1_3b", ["spec.n_layers=2", "spec.d_model=1024",
                                                       "spec.d_ffn=512", "spec.n_heads=8",
                                                       "spec.n_kv_heads=8",
                                                       "spec.vocab_size=64"])),
                             decode_tokens=2, log=lambda *_: None)
    assert [r.variant.name for r in report.results][-1] == "flash 25%"  # + the buffered one
    assert not report.results[-1].variant.direct
    for r in report.results:
        assert r.tokens_per_s > 0 and len(r.round_tokens_per_s) == 2
    for r in report.results[1:]:
        assert r.max_abs_diff < 1e-2  # same sets, same FFN (fp16 outputs)
        assert r.metrics["flash_bytes_read_per_token"] > 0
    assert report.file_cache_direct == 0  # O_DIRECT reads left no file page behind
    assert report.file_cache_buffered > 0
    # whole decode steps: the DRAM engine and the default flash variant (not the ablations)
    assert [r.variant.name for r in report.decode_results] == ["decode dram", "decode flash 25%"]
    for r in report.decode_results:
        assert r.tokens_per_s > 0 and len(r.round_tokens_per_s) == 2
    flash = report.decode_results[1]
    assert flash.max_abs_diff < 5e-2  # the same decoder around the same FFN (fp16 logits)
    assert flash.metrics["flash_bytes_read_per_token"] > 0
    assert report.trace_tokens == 2 + 2 * 3 + 2 * 2
    if report.storage.direct:  # the AIO batch curve on the weight file: batches 1 .. 128
        # and each variant's own batch (reads per layer call, rounded both ways)
        batches = [b for b, _ in report.aio_curve]
        assert batches == sorted(set(batches))
        assert {1, 2, 4, 8, 16, 32, 64, 128} <= set(batches)
        assert report.storage_bw() >= max(bw for _, bw in report.aio_curve) > 0
        flash = report.results[1]
        per_layer = flash.metrics["flash_reads_per_token"] / shape.n_layers
        assert math.floor(per_layer) in batches or math.floor(per_layer) == 0
        assert math.ceil(per_layer) in batches
        c = report.ceiling(flash)
        bpt = flash.metrics["flash_bytes_read_per_token"]
        assert c["reads_per_layer"] == pytest.approx(per_layer)
        assert c["ceiling_tokens_per_s_best"] == pytest.approx(report.storage_bw() / bpt)
        assert c["fraction_of_ceiling_at_batch"] == pytest.approx(
            flash.tokens_per_s / c["ceiling_tokens_per_s_at_batch"])
        assert c["ceiling_tokens_per_s_at_batch"] <= c["ceiling_tokens_per_s_best"] * (1 + 1e-9)
        assert any(line.startswith("target (FFN-only): flash 25%")
                   for line in report.target_lines(budget=0.25))
    text = report.render()
    assert "SYNTHETIC" in text and "flash 25% unbundled" in text and "load average" in text
    assert "WHOLE DECODE STEPS" in text and "decode flash 25%" in text
