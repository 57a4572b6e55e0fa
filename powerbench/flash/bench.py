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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from powerbench.flash.ffn import FlashFFN
from powerbench.hardware.facts import cpu_model
from powerbench.profiling.active_traces import TraceActiveSets

GB = 1e9
MB = 1e6


@dataclass(frozen=True)
class BenchShape:
    name: str = "opt_1_3b"
    n_layers: int = 24
    d_model: int = 2048
    d_ffn: int = 8192
    dtype: str = "float16"
    token_sparsity: float = 0.97  # OPT family (design.md section 4)

    @property
    def ffn_bytes(self) -> int:
        item = torch.empty((), dtype=getattr(torch, self.dtype)).element_size()
        return 2 * self.n_layers * self.d_ffn * self.d_model * item


def synthetic_weights(shape: BenchShape, seed: int = 0) -> Any:
    """A `DecoderWeights` whose FFNs are seeded random (ReLU, OPT-style, biases); the rest
    (attention, embeddings) are 1-element placeholders: only FFNs are run."""
    from powerbench.engine.weights import (
        AttentionWeights,
        DecoderWeights,
        LayerWeights,
        NormWeights,
        ReluFFNWeights,
    )

    dtype = getattr(torch, shape.dtype)
    g = torch.Generator().manual_seed(seed)
    d, f = shape.d_model, shape.d_ffn
    tiny = torch.zeros(1, 1, dtype=dtype)
    norm = NormWeights("layer", None, None, 1e-5)
    layers = []
    for _ in range(shape.n_layers):
        w1 = (torch.randn(f, d, generator=g) * d ** -0.5).to(dtype)
        w2_t = (torch.randn(f, d, generator=g) * f ** -0.5).to(dtype)
        b1 = (torch.randn(f, generator=g) * 0.01).to(dtype)
        b2 = (torch.randn(d, generator=g) * 0.01).to(dtype)
        ffn = ReluFFNWeights(w1=w1, b1=b1, w2=w2_t.t(), w2_t=w2_t, b2=b2)
        layers.append(LayerWeights(attn_norm=norm, attn=AttentionWeights(tiny, tiny, tiny, tiny),
                                   ffn_norm=norm, ffn=ffn))
    return DecoderWeights(model_type="opt", d_model=d, n_heads=1, n_kv_heads=1, head_dim=d,
                          pre_norm=True, embed=torch.zeros(1, d, dtype=dtype), layers=layers,
                          final_norm=None, lm_head=torch.zeros(1, d, dtype=dtype),
                          max_positions=1)


def decoder_weights_around(weights: Any, model: str, seed: int = 0,
                           overrides: tuple[str, ...] = ()) -> Any:
    """Whole-decoder weights for `model` (its spec's shape; seeded random attention, norms,
    positions, tied embedding / LM head: `synthetic_decoder_weights`) around the FFNs of
    `weights` (the FFN-only benchmark's, so both share one weight file)."""
    import dataclasses

    from powerbench.engine.synthetic import synthetic_decoder_weights, synthetic_spec

    spec = synthetic_spec(model, overrides=list(overrides))
    ffn0 = weights.layers[0].ffn
    if (spec.n_layers, spec.d_model, spec.d_ffn) != (weights.n_layers, weights.d_model,
                                                       ffn0.d_ffn):
        raise ValueError(f"model={model} is {spec.n_layers} x {spec.d_model} x {spec.d_ffn}, "
                         f"the benchmarked FFNs {weights.n_layers} x {weights.d_model} x "
                         f"{ffn0.d_ffn}")
    # the spec's own FFNs are not built (8 neurons), then replaced by the benchmark's
    dec = synthetic_decoder_weights(dataclasses.replace(spec, d_ffn=8), weights.dtype, seed)
    layers = [dataclasses.replace(layer, ffn=src.ffn)
              for layer, src in zip(dec.layers, weights.layers, strict=True)]
    return dataclasses.replace(dec, layers=layers)


def synthetic_profile_for(shape: BenchShape, trace_tokens: int, seed: int = 0) -> Any:
    from powerbench.model.spec import FFNKind, ModelSpec, SparsityStats
    from powerbench.profiling.synthetic import synthetic_profile

    heads = max(shape.d_model // 64, 1)
    spec = ModelSpec(name=shape.name, n_layers=shape.n_layers, d_model=shape.d_model,
                     d_ffn=shape.d_ffn, n_heads=heads, n_kv_heads=heads, ffn_kind=FFNKind.relu,
                     stats=SparsityStats(token_sparsity=shape.token_sparsity,
                                         source="bench: published OPT sparsity"))
    return synthetic_profile(spec, trace_tokens=trace_tokens, seed=seed)


def cached_bytes() -> int:
    """/proc/meminfo Cached (page cache) in bytes; 0 off Linux."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("Cached:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def page_cache_bytes(path: str | os.PathLike) -> int | None:
    """Bytes of `path` resident in the page cache (mincore over a private mapping, which
    reads nothing); None where mincore is unavailable. Unlike /proc/meminfo Cached this
    is immune to other processes' file activity."""
    import ctypes
    import mmap

    try:
        size = os.path.getsize(path)
        if size == 0:
            return 0
        libc = ctypes.CDLL(None, use_errno=True)
        page = mmap.PAGESIZE
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            anchor = ctypes.c_char.from_buffer(mm)
            vec = (ctypes.c_ubyte * (-(-size // page)))()
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size),
                              vec)
            del anchor
        finally:
            mm.close()
        if rc != 0:
            return None
        return int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1)) * page
    except (OSError, AttributeError, ValueError):
        return None


@dataclass(frozen=True)
class Variant:
    name: str
    budget: float | None  # fraction of FFN bytes; None: the in-DRAM SparseFFN
    bundled: bool = True
    pipeline: bool = True
    direct: bool = True
    io_engine: str = "auto"  # auto (native AIO with O_DIRECT) | aio | threads
    compute_threads: int | None = None  # the flash kernels' threads (None: torch's)
    # read layer l+1's predicted misses while layer l computes, with a stand-in predictor
    # of this recall (= precision; 1.0: the oracle); None: no lookahead
    lookahead_recall: float | None = None
    compiled_plan: bool = True  # the per-call planning in compiled code (else numpy)

    @property
    def lookahead(self) -> bool:
        return self.lookahead_recall is not None


# top-3% lookahead recall (= precision) measured on SmolLM2-135M (`python -m
# powerbench.flash.lookahead_recall`, results/flash_lookahead_recall.txt): layer l+1's own
# gate/up on layer l's FFN input, mean over the 29 layer pairs
LOOKAHEAD_RECALL = 0.53


def default_variants(budgets: tuple[float, ...] = (1.0, 0.5, 0.25, 0.1),
                     ablation_budget: float = 0.5) -> list[Variant]:
    out = [Variant("dram sparse", None)]
    out += [Variant(f"flash {b:.0%}", b) for b in budgets]
    b = ablation_budget
    out += [Variant(f"flash {b:.0%} unbundled", b, bundled=False),
            Variant(f"flash {b:.0%} no pipeline", b, pipeline=False),
            Variant(f"flash {b:.0%} unbundled no pipeline", b, bundled=False, pipeline=False),
            Variant(f"flash {b:.0%} thread-pool reads", b, io_engine="threads"),
            Variant(f"flash {b:.0%} one compute thread", b, compute_threads=1),
            Variant(f"flash {b:.0%} numpy planning", b, compiled_plan=False),
            Variant(f"flash {b:.0%} io_uring SQPOLL", b, io_engine="uring"),
            Variant(f"flash {b:.0%} lookahead oracle", b, lookahead_recall=1.0),
            Variant(f"flash {b:.0%} lookahead recall {LOOKAHEAD_RECALL}", b,
                    lookahead_recall=LOOKAHEAD_RECALL)]
    return out


@dataclass
class VariantResult:
    variant: Variant
    tokens_per_s: float = 0.0
    round_tokens_per_s: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    load_s: float = 0.0
    max_abs_diff: float = 0.0  # vs the DRAM engine's outputs on the same steps


@dataclass
class FlashBenchReport:
    shape: BenchShape
    results: list[VariantResult]
    storage: Any  # StorageProfile
    io_threads: int
    cluster_bytes: int
    tokens_per_round: int
    rounds: int
    mean_active: float
    cached_growth_direct: int
    cached_growth_buffered: int | None
    file_cache_direct: int | None  # weight-file bytes newly in the page cache (O_DIRECT runs)
    file_cache_buffered: int | None
    loadavg_before: tuple[float, float, float]
    loadavg_after: tuple[float, float, float]
    machine: str
    threads: int
    seconds: float
    decode_results: list[VariantResult] = field(default_factory=list)
    decode_model: str | None = None
    decode_tokens: int = 0
    trace_tokens: int = 0  # the synthetic profile's trace length (its draws depend on it)
    warmup: int = 0
    aio_curve: tuple[tuple[int, float], ...] = ()  # (batch, bytes/s) on the weight file

    def storage_bw(self) -> float:
        """Measured random-read bandwidth at the engine's read size: the best of the
        thread-pool microbenchmark (any queue depth) and the AIO batches on the weight
        file (any batch)."""
        return max([self.storage.best_bandwidth(self.cluster_bytes),
                    *(bw for _, bw in self.aio_curve)])

    def table(self, results: list[VariantResult] | None = None, tokens: int | None = None
              ) -> str:
        results = self.results if results is None else results
        tokens = self.tokens_per_round if tokens is None else tokens
        base = results[0].round_tokens_per_s
        ref = self.storage_bw()
        head = (f"{'variant':34s} {'tok/s':>8s} {'xDRAM':>6s} {'range':>11s} {'MB/tok':>7s} "
                f"{'GB/s':>6s} "
                f"{'%bw':>5s} {'hot':>5s} {'lru':>5s} {'wait ms':>8s} {'comp ms':>8s} "
                f"{'plan ms':>8s} {'subm ms':>8s}")
        lines = [head, "-" * len(head)]
        for r in results:
            m = r.metrics
            ratios = [a / b for a, b in zip(r.round_tokens_per_s, base, strict=True)]
            ratio = statistics.median(ratios)
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            if r.variant.budget is None:
                lines.append(f"{r.variant.name:34s} {r.tokens_per_s:8.1f} {1.0:6.2f}")
                continue
            steps = tokens * self.rounds
            gbs = m.get("flash_read_gb_s", 0.0)
            lines.append(
                f"{r.variant.name + ('' if r.variant.direct else ' (buffered)'):34s} "
                f"{r.tokens_per_s:8.1f} {ratio:6.2f} {spread:>11s} "
                f"{m['flash_bytes_read_per_token'] / MB:7.2f} {gbs:6.2f} "
                f"{100 * gbs * GB / ref:5.0f} {m['flash_hit_rate_hot']:5.2f} "
                f"{m['flash_hit_rate_lru']:5.2f} {1e3 * m['flash_io_wait_s'] / steps:8.2f} "
                f"{1e3 * m['flash_compute_s'] / steps:8.2f} {1e3 * m['flash_plan_s'] / steps:8.2f} "
                f"{1e3 * m.get('flash_submit_s', 0.0) / steps:8.2f}")
        return "\n".join(lines)

    def render(self) -> str:
        s = self.shape
        st = self.storage
        out = [
            "FlashFFN benchmark: SYNTHETIC random weights, active sets drawn from the synthetic "
            "OPT profile;",
            "only speed and storage traffic are meaningful. FFN-only decode steps (1 token, "
            f"{s.n_layers} FFN layers each; no attention).",
            f"shape {s.name}: {s.n_layers} layers, d_model {s.d_model}, d_ffn {s.d_ffn}, "
            f"{s.dtype}, FFN {s.ffn_bytes / GB:.2f} GB; mean active neurons/layer/token "
            f"{self.mean_active:.0f} ({self.mean_active / s.d_ffn:.1%})",
            f"machine: {self.machine}, torch threads {self.threads}, io_threads "
            f"{self.io_threads}; load average before {self.loadavg_before}, after "
            f"{self.loadavg_after}",
            f"trace tokens {self.trace_tokens} (seed 0): warm-up {self.warmup}, then "
            f"{self.rounds} x {self.tokens_per_round} FFN-only"
            + (f", then {self.rounds} x {self.decode_tokens} whole-decode" if self.decode_tokens
               else "") + " tokens, each round on new trace tokens",
            f"rounds {self.rounds} x {self.tokens_per_round} tokens, variants interleaved "
            "(tok/s: median round; xDRAM: median over rounds of the ratio to the DRAM engine's "
            "tok/s in the same round, range: min-max); ms columns: per token (plan: the "
            "engine's own planning; subm: handing reads to the kernel, io_submit's per-read "
            "kernel work included; wait: blocked on reads; comp: sparse kernels); "
            f"wall {self.seconds:.0f} s",
            f"storage (O_DIRECT={st.direct}, {st.path}): random reads "
            + ", ".join(f"{r.block_bytes // 1024}K qd{r.queue_depth} "
                        f"{r.bandwidth / GB:.2f} GB/s ({r.latency_s * 1e6:.0f} us)"
                        for r in st.results),
            f"AIO batches on the weight file ({self.cluster_bytes // 1024}K random reads "
            "submitted together, then one wait for all: the engine's pattern per layer): "
            + (", ".join(f"{b}: {bw / GB:.2f}" for b, bw in self.aio_curve) + " GB/s"
               if self.aio_curve else "n/a"),
            f"%bw = achieved / measured random-read bandwidth at the engine's read size "
            f"({self.cluster_bytes // 1024}K, best of both microbenchmarks: "
            f"{self.storage_bw() / GB:.2f} GB/s); best measured at any size "
            f"{self.storage.random_read_bw / GB:.2f} GB/s. "
            "Achieved = bytes / time the reads were outstanding as seen by the engine "
            "(an upper bound on device time when overlapped)",
            f"page cache: weight-file pages added (mincore) during O_DIRECT variants "
            f"{_mb(self.file_cache_direct)}, during the buffered variant "
            f"{_mb(self.file_cache_buffered)}; /proc/meminfo Cached growth (all processes) "
            f"{self.cached_growth_direct / MB:.1f} MB / "
            f"{_mb(self.cached_growth_buffered)}",
            "",
            self.table(),
            "",
            "max |flash - dram| over the first round's outputs: "
            + ", ".join(f"{r.variant.name}: {r.max_abs_diff:.2e}" for r in self.results[1:]),
        ]
        ahead = [r for r in self.results if r.variant.lookahead and r.metrics]
        if ahead:
            out.append(
                "lookahead (layer l+1's predicted misses read while layer l computes; a "
                "stand-in predictor of the given recall = precision drawn from the trace, "
                "false positives in proportion to activation frequency): " + ", ".join(
                    f"{r.variant.name}: {r.metrics.get('flash_prefetched', 0) / self.tokens_per_round:.0f}"
                    f" clusters/token read ahead, "
                    f"{r.metrics.get('flash_prefetch_used', 0) / max(r.metrics.get('flash_prefetched', 0), 1):.0%}"
                    " of them used" for r in ahead))
        if self.decode_results:
            out += [
                "",
                f"WHOLE DECODE STEPS ({self.decode_model} shape, batch 1, {self.decode_tokens} "
                "tokens per round from an empty KV cache, the same rounds interleaved): "
                "attention, norms, positions and the LM head in DRAM on both sides (seeded "
                "random, dense kernels), the FFN from the engines above (same objects, caches "
                "warm; new trace tokens after the FFN-only rounds').",
                "",
                self.table(self.decode_results, self.decode_tokens),
                "",
                "max |flash - dram| of the first round's last logits: "
                + ", ".join(f"{r.variant.name}: {r.max_abs_diff:.2e}"
                            for r in self.decode_results[1:]),
            ]
        return "\n".join(out)


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / MB:.1f} MB"


def run_flash_bench(shape: BenchShape | None = None, variants: list[Variant] | None = None,
                    tokens: int = 32, rounds: int = 3, warmup: int = 16, io_threads: int = 16,
                    hot_fraction: float = 0.5, cache_dir: str | os.PathLike | None = None,
                    buffered_check: bool = True, storage_mb: int = 512,
                    storage_seconds: float = 0.5, seed: int = 0,
                    decode_model: str | None = None, decode_tokens: int = 16,
                    decode_overrides: tuple[str, ...] = (), log: Any = print) -> FlashBenchReport:
    """Measure the variants side by side (see the module docstring). With `decode_model`
    (a model config whose shape is `shape`'s, e.g. opt_1_3b), whole decode steps too: the
    in-DRAM engine and the default flash variants as the FFN of one `Decoder` each."""
    from powerbench.engine.sparse import SparseFFN
    from powerbench.hardware.storage import measure_storage

    t_start = time.perf_counter()
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
    load_before = os.getloadavg()
    log(f"bench: synthetic weights {shape} ...")
    weights = synthetic_weights(shape, seed)
    decode_tokens = min(decode_tokens, tokens) if decode_model else 0
    # warm-up, the FFN-only rounds, then the whole-decode rounds: every round on new tokens
    trace_len = warmup + rounds * tokens + rounds * decode_tokens
    profile = synthetic_profile_for(shape, trace_len, seed)
    sets = TraceActiveSets(profile)
    xs = torch.randn(trace_len, 1, shape.d_model, generator=torch.Generator().manual_seed(seed))
    xs = xs.to(getattr(torch, shape.dtype))

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
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
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
    decode_results = (_decode_rounds(weights, engines, results, sets, decode_model,
                                     decode_tokens, rounds, warmup + rounds * tokens, seed,
                                     decode_overrides, log) if decode_model else [])
    flash_ffns = [e for e in engines if isinstance(e, FlashFFN)]
    g = flash_ffns[0].geometry
    bundled_file = next((e.path for e in flash_ffns if e.geometry.bundled), flash_ffns[0].path)
    for e in flash_ffns:
        e.close()
    del engines, flash_ffns
    gc.collect()
    log("bench: storage microbenchmarks ...")
    from powerbench.flash.aio import batch_curve

    try:
        curve = batch_curve(bundled_file, g.cluster_bytes, seconds=storage_seconds / 2)
    except OSError:  # no native AIO here
        curve = ()
    storage = measure_storage(root, file_mb=storage_mb,
                              blocks_kb=tuple(sorted({g.cluster_bytes // 1024, 4, 512})),
                              queue_depths=tuple(sorted({1, 8, io_threads, 32})),
                              seconds=storage_seconds)
    return FlashBenchReport(
        shape=shape, results=results, storage=storage, io_threads=io_threads,
        cluster_bytes=g.cluster_bytes, tokens_per_round=tokens, rounds=rounds,
        mean_active=sets.mean_active(), cached_growth_direct=cached_direct,
        cached_growth_buffered=cached_buffered, file_cache_direct=file_direct,
        file_cache_buffered=file_buffered, loadavg_before=load_before,
        loadavg_after=os.getloadavg(), machine=f"{cpu_model()}, {os.cpu_count()} CPUs",
        threads=torch.get_num_threads(), seconds=time.perf_counter() - t_start,
        decode_results=decode_results, decode_model=decode_model,
        decode_tokens=decode_tokens, trace_tokens=trace_len, warmup=warmup, aio_curve=curve)


def _summarise(res: VariantResult, tot: dict[str, float], rounds: int, tokens: int) -> None:
    res.tokens_per_s = statistics.median(res.round_tokens_per_s)
    if res.variant.budget is None:
        return
    m = {k: v / rounds for k, v in tot.items()}  # per-round means
    for k in ("flash_io_wait_s", "flash_compute_s", "flash_plan_s", "flash_submit_s",
              "flash_install_s", "flash_io_active_s", "flash_reads"):
        m[k] = tot[k]  # totals over all rounds
    read_bytes = m["flash_bytes_read_per_token"] * tokens * rounds
    m["flash_read_gb_s"] = read_bytes / tot["flash_io_active_s"] / GB \
        if tot["flash_io_active_s"] else 0.0
    res.metrics = m


def _decode_rounds(weights: Any, engines: list[Any], results: list[VariantResult],
                   sets: TraceActiveSets, model: str, tokens: int, rounds: int, first: int,
                   seed: int, overrides: tuple[str, ...], log: Any) -> list[VariantResult]:
    """Whole decode steps: one `Decoder` per engine (the DRAM one and the default flash
    variants: bundled, pipelined, O_DIRECT, default I/O engine), interleaved rounds of
    `tokens` steps from an empty KV cache, round r on trace tokens first + r * tokens on
    (after the FFN-only rounds' tokens: new to the caches)."""
    from powerbench.engine.decoder import Decoder

    dweights = decoder_weights_around(weights, model, seed, overrides)
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
