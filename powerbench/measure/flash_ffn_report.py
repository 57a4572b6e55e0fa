"""The FFN-only flash benchmark's variants and its report (table and text)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from powerbench.load_window import LoadWindow
from powerbench.measure.flash_ffn_inputs import BenchShape

GB = 1e9
MB = 1e6


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


# top-3% lookahead recall (= precision) measured on SmolLM2-135M (`powerbench bench-flash
# task.mode=lookahead_recall`): layer l+1's own
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


def curve_bandwidth(curve: Any, batch: float) -> float:
    """Random-read bandwidth at `batch` reads submitted together, from a measured
    ((batch, bytes/s), ...) curve: interpolated in log2(batch), clamped to its ends."""
    import numpy as np

    xs, ys = zip(*sorted(curve), strict=True)
    return float(np.interp(np.log2(max(batch, 1.0)), np.log2(xs), ys))


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
    load: LoadWindow  # UTC time and load average around the whole benchmark
    machine: str
    threads: int
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

    def reads_per_layer(self, r: VariantResult) -> float:
        """The variant's reads per layer call (each layer's misses are one batch)."""
        return r.metrics.get("flash_reads_per_token", 0.0) / self.shape.n_layers

    def ceiling(self, r: VariantResult) -> dict[str, float]:
        """What the disk allows for the variant's bytes per token: tok/s at the bandwidth
        measured at its batch size (its reads per layer, AIO batches of its read size on
        its weight file) and at the best bandwidth measured at its read size; the
        variant's tok/s as a fraction of each."""
        bpt = r.metrics.get("flash_bytes_read_per_token", 0.0)
        if not bpt or not self.aio_curve:
            return {}
        batch = self.reads_per_layer(r)
        at_batch = curve_bandwidth(self.aio_curve, batch) / bpt
        best = self.storage_bw() / bpt
        return {"reads_per_layer": batch, "ceiling_tokens_per_s_at_batch": at_batch,
                "fraction_of_ceiling_at_batch": r.tokens_per_s / at_batch,
                "ceiling_tokens_per_s_best": best,
                "fraction_of_ceiling_best": r.tokens_per_s / best}

    def target_lines(self, budget: float = 0.5, fraction: float = 0.8) -> list[str]:
        """The 80%-of-ceiling target for the default variant at `budget`, FFN-only and
        whole decode, with the arithmetic."""
        out = []
        for phase, results in (("FFN-only", self.results), ("whole decode", self.decode_results)):
            r = next((r for r in results if r.variant.budget == budget
                      and r.variant.name.endswith(f"flash {budget:.0%}")), None)
            c = self.ceiling(r) if r is not None else {}
            if not c:
                continue
            ok = c["fraction_of_ceiling_at_batch"] >= fraction
            out.append(
                f"target ({phase}): {r.variant.name} >= {fraction:.0%} of the disk's ceiling "
                f"for its bytes: {'met' if ok else 'MISSED'}: {r.tokens_per_s:.1f} tok/s vs "
                f"{c['ceiling_tokens_per_s_at_batch']:.1f} tok/s at its batch "
                f"({c['reads_per_layer']:.1f} reads/layer, "
                f"{r.metrics['flash_bytes_read_per_token'] / MB:.2f} MB/token) = "
                f"{c['fraction_of_ceiling_at_batch']:.1%}; at the best bandwidth measured "
                f"at its read size {c['ceiling_tokens_per_s_best']:.1f} tok/s, "
                f"{c['fraction_of_ceiling_best']:.1%}")
        return out

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
            f"{self.io_threads}; load average "
            f"{self.load.load_before:.2f} -> {self.load.load_after:.2f}",
            f"trace tokens {self.trace_tokens} (seed 0): warm-up {self.warmup}, then "
            f"{self.rounds} x {self.tokens_per_round} FFN-only"
            + (f", then {self.rounds} x {self.decode_tokens} whole-decode" if self.decode_tokens
               else "") + " tokens, each round on new trace tokens",
            f"rounds {self.rounds} x {self.tokens_per_round} tokens, variants interleaved "
            "(tok/s: median round; xDRAM: median over rounds of the ratio to the DRAM engine's "
            "tok/s in the same round, range: min-max); ms columns: per token (plan: the "
            "engine's own planning; subm: handing reads to the kernel, io_submit's per-read "
            "kernel work included; wait: blocked on reads; comp: sparse kernels); "
            f"wall {self.load.seconds:.0f} s",
            f"storage (O_DIRECT={st.direct}, the weight files' folder): random reads "
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
