"""FFN-only decode benchmark: the in-DRAM `SparseFFN` against `FlashFFN`, side by side.

SYNTHETIC WEIGHTS: seeded random FFN weights of a real model's shape (default OPT-1.3B:
24 layers, d_model 2048, d_ffn 8192, fp16: 1.6 GB of FFN weights). Random weights do not
activate like trained ones, so the active sets are not computed from them: they are drawn
from the synthetic activation profile (`powerbench.profiling.synthetic`) fitted to the
model family's published sparsity and skew (OPT: 97% inactive per token), one trace
token per decode step, and every engine gets the same sets (`TraceActiveSets`). Only the
speed (and the storage traffic) is meaningful, not the numbers the FFNs compute.

A decode step = one FFN call per layer on a 1-token input (attention, norms and the LM
head are not run): FFN-only tokens/s. Every variant is measured in `rounds` rounds,
interleaved (A B C ... A B C ...) so that load from other processes hits all of them
alike, each round on fresh trace tokens (a cache never sees the same token twice); the
median round gives tokens/s, the sums give the traffic. The hot segment comes from the
profile's counts; LRU segments start warm (`preload_lru`) and `warmup` steps run first.

Page-cache check: `/proc/meminfo` Cached is read around the O_DIRECT variants and around
one buffered variant; the storage reference is `measure_storage` on the same directory
(random reads of the cluster size at the reader's queue depth, and 512 KB).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from math import ceil, floor
from pathlib import Path
from typing import Any

import torch

from powerbench.flash.ffn import FlashFFN
from powerbench.hardware.facts import cpu_model
from powerbench.load_window import LoadWindow
from powerbench.measure.flash_ffn_inputs import (
    BenchShape,
    decoder_weights_around,
    synthetic_profile_for,
    synthetic_weights,
)
from powerbench.measure.flash_ffn_report import (
    FlashBenchReport,
    Variant,
    VariantResult,
    default_variants,
)
from powerbench.measure.page_cache_usage import cached_bytes, drop_page_cache, page_cache_bytes
from powerbench.model.spec import ModelSpec
from powerbench.profiling.active_traces import TraceActiveSets

GB = 1e9


def run_flash_bench(shape: BenchShape | None = None, variants: list[Variant] | None = None,
                    tokens: int = 32, rounds: int = 3, warmup: int = 16, io_threads: int = 16,
                    hot_fraction: float = 0.5, cache_dir: str | os.PathLike | None = None,
                    buffered_check: bool = True, storage_mb: int = 512,
                    storage_seconds: float = 0.5, seed: int = 0,
                    decode_spec: ModelSpec | None = None, decode_tokens: int = 16,
                    log: Any = print) -> FlashBenchReport:
    """Measure the variants side by side (see the module docstring). With `decode_spec`
    (a model spec whose shape is `shape`'s, e.g. opt_1_3b's), whole decode steps too: the
    in-DRAM engine and the default flash variants as the FFN of one `Decoder` each."""
    from powerbench.engine.sparse import SparseFFN
    from powerbench.hardware.storage import measure_storage

    window = LoadWindow().__enter__()  # the UTC time and load around the whole run
    shape = shape or BenchShape()
    variants = variants or default_variants()
    if variants[0].budget is not None:
        raise ValueError("the first variant must be the in-DRAM baseline (budget None)")
    if buffered_check:
        budgets = [v.budget for v in variants if v.budget is not None]
        b = 0.5 if 0.5 in budgets else budgets[0]
        variants = [*variants, Variant(f"flash {b:.0%}", b, direct=False)]
    root = Path(cache_dir) if cache_dir else None
    if root is None:
        from powerbench.paths import cache_dir as default_cache

        root = default_cache() / "flash"
    log(f"bench: synthetic weights {shape} ...")
    weights = synthetic_weights(shape, seed)
    decode_tokens = min(decode_tokens, tokens) if decode_spec is not None else 0
    # warm-up, the FFN-only rounds, then the whole-decode rounds: every round on new tokens
    trace_len = warmup + rounds * tokens + rounds * decode_tokens
    profile = synthetic_profile_for(shape, trace_len, seed)
    sets = TraceActiveSets(profile)
    xs = torch.randn(trace_len, 1, shape.d_model, generator=torch.Generator().manual_seed(seed))
    xs = xs.to(shape.torch_dtype)

    engines: list[Any] = []
    results: list[VariantResult] = []
    for v in variants:
        t0 = time.perf_counter()
        if v.budget is None:
            ffn: Any = SparseFFN(weights, backend="sparse_cpu", predictors=sets, fused=False,
                                 dense_from_rows=0)
        else:
            pred = sets if not v.lookahead else sets.with_lookahead(v.lookahead_recall)
            ffn = FlashFFN(weights, predictors=pred, cache_dir=str(root),
                           dram_budget_fraction=v.budget, hot_fraction=hot_fraction,
                           io_threads=io_threads, io_engine=v.io_engine, bundled=v.bundled,
                           pipeline=v.pipeline, direct=v.direct, dense_from_rows=0,
                           compute_threads=v.compute_threads, lookahead=v.lookahead,
                           compiled_plan=v.compiled_plan, profile=profile)
        engines.append(ffn)
        results.append(VariantResult(v, load_s=time.perf_counter() - t0))
        log(f"bench: built {v.name} in {time.perf_counter() - t0:.1f} s")

    def steps(ffn: Any, start: int, n: int, keep: bool = False) -> tuple[float, list]:
        sets.seek(start)
        outs = []
        t0 = time.perf_counter()
        for t in range(start, start + n):
            x = xs[t]
            for layer in range(shape.n_layers):
                y = ffn(layer, x)
                if keep and t == start:
                    outs.append(y)
        return time.perf_counter() - t0, outs

    # start every variant from a cold page cache (the buffered one's start-up reads would
    # otherwise have left the file in it)
    for path in {e.path for e in engines if isinstance(e, FlashFFN)}:
        drop_page_cache(path)
    # warm-up (same tokens for all), then interleaved rounds on fresh tokens
    for ffn in engines:
        steps(ffn, 0, warmup)
        if isinstance(ffn, FlashFFN):
            ffn.rewind()
    totals: list[dict[str, float]] = [{} for _ in engines]
    cached_direct = 0
    cached_buffered: int | None = None
    file_direct: int | None = None
    file_buffered: int | None = None
    reference: list = []
    for r in range(rounds):
        start = warmup + r * tokens
        for i, (ffn, res) in enumerate(zip(engines, results, strict=True)):
            path = getattr(ffn, "path", None)
            c0 = cached_bytes()
            f0 = page_cache_bytes(path) if path is not None else None
            dt, outs = steps(ffn, start, tokens, keep=(r == 0))
            growth = cached_bytes() - c0
            f1 = page_cache_bytes(path) if path is not None else None
            fgrowth = None if f0 is None or f1 is None else max(f1 - f0, 0)  # pages added
            res.round_tokens_per_s.append(tokens / dt)
            if res.variant.budget is None:
                reference = outs if r == 0 else reference
                continue
            if res.variant.direct:
                cached_direct += growth
                if fgrowth is not None:
                    file_direct = (file_direct or 0) + fgrowth
            else:
                cached_buffered = (cached_buffered or 0) + growth
                if fgrowth is not None:
                    file_buffered = (file_buffered or 0) + fgrowth
            if r == 0:
                res.max_abs_diff = max(float((a.float() - b.float()).abs().max())
                                       for a, b in zip(reference, outs, strict=True))
            for k, val in ffn.metrics().items():
                totals[i][k] = totals[i].get(k, 0.0) + val
            ffn.rewind()
        log(f"bench: round {r + 1}/{rounds}: " + ", ".join(
            f"{res.variant.name} {res.round_tokens_per_s[-1]:.1f}" for res in results))
    for res, tot in zip(results, totals, strict=True):
        _summarise(res, tot, rounds, tokens)
    decode_results = (_decode_rounds(weights, engines, results, sets, decode_spec,
                                     decode_tokens, rounds, warmup + rounds * tokens, seed,
                                     log) if decode_spec is not None else [])
    flash_ffns = [e for e in engines if isinstance(e, FlashFFN)]
    g = flash_ffns[0].geometry
    bundled_file = next((e.path for e in flash_ffns if e.geometry.bundled), flash_ffns[0].path)
    for e in flash_ffns:
        e.close()
    del engines, flash_ffns
    gc.collect()
    log("bench: storage microbenchmarks ...")
    from powerbench.flash.aio import batch_curve

    # the ceiling at each variant's own batch size (reads per layer call) is measured, not
    # interpolated between powers of two
    engine_batches = {int(f(r.metrics["flash_reads_per_token"] / shape.n_layers))
                      for r in [*results, *decode_results] if r.metrics for f in (floor, ceil)}
    try:
        curve = batch_curve(bundled_file, g.cluster_bytes, seconds=storage_seconds,
                            batches=tuple(sorted(engine_batches)))
    except OSError:  # no native AIO here
        curve = ()
    storage = measure_storage(root, file_mb=storage_mb,
                              blocks_kb=tuple(sorted({g.cluster_bytes // 1024, 4, 512})),
                              queue_depths=tuple(sorted({1, 8, io_threads, 32})),
                              seconds=storage_seconds)
    window.__exit__()
    return FlashBenchReport(
        shape=shape, results=results, storage=storage, io_threads=io_threads,
        cluster_bytes=g.cluster_bytes, tokens_per_round=tokens, rounds=rounds,
        mean_active=sets.mean_active(), cached_growth_direct=cached_direct,
        cached_growth_buffered=cached_buffered, file_cache_direct=file_direct,
        file_cache_buffered=file_buffered, load=window,
        machine=f"{cpu_model()}, {os.cpu_count()} CPUs", threads=torch.get_num_threads(),
        decode_results=decode_results,
        decode_model=None if decode_spec is None else decode_spec.name,
        decode_tokens=decode_tokens, trace_tokens=trace_len, warmup=warmup, aio_curve=curve)


def _summarise(res: VariantResult, tot: dict[str, float], rounds: int, tokens: int) -> None:
    res.tokens_per_s = statistics.median(res.round_tokens_per_s)
    if res.variant.budget is None:
        return
    m = {k: v / rounds for k, v in tot.items()}  # per-round means
    for k in ("flash_io_wait_s", "flash_compute_s", "flash_plan_s", "flash_submit_s",
              "flash_install_s", "flash_io_active_s", "flash_reads"):
        m[k] = tot[k]  # totals over all rounds
    m["flash_reads_per_token"] = tot["flash_reads"] / (tokens * rounds)
    read_bytes = m["flash_bytes_read_per_token"] * tokens * rounds
    m["flash_read_gb_s"] = read_bytes / tot["flash_io_active_s"] / GB \
        if tot["flash_io_active_s"] else 0.0
    res.metrics = m


def _decode_rounds(weights: Any, engines: list[Any], results: list[VariantResult],
                   sets: TraceActiveSets, spec: ModelSpec, tokens: int, rounds: int,
                   first: int, seed: int, log: Any) -> list[VariantResult]:
    """Whole decode steps: one `Decoder` per engine (the DRAM one and the default flash
    variants: bundled, pipelined, O_DIRECT, default I/O engine), interleaved rounds of
    `tokens` steps from an empty KV cache, round r on trace tokens first + r * tokens on
    (after the FFN-only rounds' tokens: new to the caches)."""
    from powerbench.engine.decoder import Decoder

    dweights = decoder_weights_around(weights, spec, seed)
    default = Variant("", 0.0)
    chosen = [i for i, r in enumerate(results)
              if r.variant.budget is None or (
                  (r.variant.bundled, r.variant.pipeline, r.variant.direct, r.variant.io_engine,
                   r.variant.compute_threads, r.variant.lookahead, r.variant.compiled_plan)
                  == (default.bundled, default.pipeline, default.direct, default.io_engine,
                      default.compute_threads, default.lookahead, default.compiled_plan))]
    decoders = [Decoder(dweights, ffn=engines[i]) for i in chosen]
    out = [VariantResult(Variant("decode " + results[i].variant.name, results[i].variant.budget,
                                 io_engine=results[i].variant.io_engine)) for i in chosen]
    ids = torch.randint(0, dweights.lm_head.shape[0], (tokens,),
                        generator=torch.Generator().manual_seed(seed + 7))

    def run(dec: Decoder, start: int) -> tuple[float, torch.Tensor]:
        sets.seek(start)
        cache = dec.new_cache(1, tokens)
        t0 = time.perf_counter()
        for t in range(tokens):
            logits = dec.forward(ids[t].view(1, 1), cache, last_only=True)
        return time.perf_counter() - t0, logits

    for dec in decoders:  # warm-up: one token each (kernels, allocator)
        sets.seek(0)
        dec.forward(ids[:1].view(1, 1), dec.new_cache(1, 1), last_only=True)
        if isinstance(dec.ffn, FlashFFN):
            dec.ffn.rewind()
    totals: list[dict[str, float]] = [{} for _ in chosen]
    for r in range(rounds):
        ref = None
        for k, (dec, res) in enumerate(zip(decoders, out, strict=True)):
            dt, logits = run(dec, first + r * tokens)
            res.round_tokens_per_s.append(tokens / dt)
            if res.variant.budget is None:
                ref = logits
                continue
            if r == 0 and ref is not None:
                res.max_abs_diff = float((logits.float() - ref.float()).abs().max())
            for key, val in dec.ffn.metrics().items():
                totals[k][key] = totals[k].get(key, 0.0) + val
            dec.ffn.rewind()
        log(f"bench: decode round {r + 1}/{rounds}: " + ", ".join(
            f"{res.variant.name} {res.round_tokens_per_s[-1]:.2f}" for res in out))
    for res, tot in zip(out, totals, strict=True):
        _summarise(res, tot, rounds, tokens)
    return out
