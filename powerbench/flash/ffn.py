"""`FlashFFN`: the decoder FFN for engine=flash (PowerInfer-2's flash-offloaded FFN).

The FFN weights live in a file (`powerbench.flash.layout`, bundled and cluster-aligned by
default), written once from the model's weights and reused while it checks out. DRAM
holds a segmented neuron cache (`powerbench.solver.neuron_cache`) of `dram_budget_gb` (or
`dram_budget_fraction` of the FFN's weight bytes): a pinned hot segment, chosen from the
`ActivationProfile` counts when a `profile` is offered (else the whole budget is LRU),
and per-layer LRU segments, warm-started (`preload_lru`) with each layer's next most
frequent clusters. Each call: the predictors' active set, the cache lookup,
page-cache-bypassing reads of the missing clusters (`io_engine`: "auto", the default, is
Linux native AIO where O_DIRECT is in effect: one `io_submit` per layer through
preallocated iocbs, measured faster side by side on the 2-vCPU VM than the pool of
`io_threads` reader threads, "threads"), overlapped with the resident neurons' compute
(`pipeline`), then the rest (`powerbench.flash.layer_pipeline`).

DRAM use: the cache (the budget), one layer's worth of scratch slots for uncached reads
(`flash_scratch_gb`), the biases. The decoder's own `weights` still hold every FFN
matrix (the engine extracts them from the HF model); FlashFFN never reads them after
writing the file, but it cannot free them.

Same call signature and same outputs (within fp tolerance) as `SparseFFN` with the same
predictors: the same neurons, the same operator backend, another summation order. Calls
of at least `dense_from_rows` rows (prompts) compute every neuron, as SparseFFN's dense
path does, reading the missing ones from the file into scratch without caching them.

The engine builds it from the `ffn` node: `FlashFFN(weights=..., **node, predictors=...,
profile=..., loaded=...)`. The decoder's in-DRAM copy of the weights is read only to
write (and fingerprint) the file; every FFN call computes from the cache. With
`weights=None` and a `path` (a file written beforehand, e.g. streamed by
`powerbench.flash.synthetic_file`) no FFN weight is ever in DRAM beyond the cache and
one layer of scratch: the file's geometry is used as it is (`bundled` and
`cluster_neurons` are the file's).
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from powerbench.flash.layer_pipeline import LayerPipeline
from powerbench.flash.layout import Verify, geometry_for, layers_of, weights_fingerprint
from powerbench.flash.layout_io import ensure_layout, open_layout
from powerbench.flash.reader import DirectReader
from powerbench.ops import get_backend
from powerbench.predictor.replay import ReplayedActiveSets
from powerbench.solver.neuron_cache import SegmentedNeuronCache, plan_segments

log = logging.getLogger(__name__)

GB = 1e9


def _kind(weights: Any) -> str:
    return str(getattr(weights.layers[0].ffn.kind, "value", weights.layers[0].ffn.kind))


def cluster_frequencies(profile: Any, n_clusters: int, cluster_neurons: int) -> np.ndarray:
    """[n_layers, n_clusters]: summed activation frequency of each cluster's neurons."""
    freq = np.asarray(profile.frequencies(), dtype=np.float64)
    pad = n_clusters * cluster_neurons - freq.shape[1]
    if pad:
        freq = np.pad(freq, ((0, 0), (0, pad)))
    return freq.reshape(freq.shape[0], n_clusters, cluster_neurons).sum(axis=2)


class FlashFFN:
    def __init__(self, weights: Any, predictors: Any = None, path: str | None = None,
                 cache_dir: str | None = None, dram_budget_gb: float | None = None,
                 dram_budget_fraction: float | None = 0.5, hot_fraction: float = 0.5,
                 cluster_neurons: int | None = None, io_threads: int = 16,
                 io_engine: str = "auto", io_depth: int = 128, io_submit_thread: bool = False,
                 compute_threads: int | None = None,
                 bundled: bool = True, pipeline: bool = True, direct: bool = True,
                 backend: str = "sparse_cpu", dense_from_rows: int = 32,
                 max_read_kb: int = 1024, verify: Verify = "header", preload_lru: bool = True,
                 lookahead: bool = False, compiled_plan: bool = True, profile: Any = None,
                 loaded: Any = None) -> None:
        if predictors is None:
            raise ValueError("engine=flash computes the neurons a predictor chooses: run it "
                             "with predictor=fixed, adaptive or oracle")
        if loaded is not None:
            predictors.check_compatible(loaded.spec)
        if weights is not None and weights.device.type != "cpu":
            raise ValueError(f"FlashFFN computes on the CPU; the weights are on {weights.device}")
        move = getattr(predictors, "to", None)
        if callable(move):
            move(device=torch.device("cpu"))
        if getattr(predictors, "idealised", False):
            predictors = ReplayedActiveSets(predictors)
        self.predictors = predictors
        self.ops = get_backend(backend)
        self.backend = self.ops.name
        self.dense_from_rows = dense_from_rows
        # the kernels' threads during this FFN's calls (None: torch's setting): on a 2-vCPU
        # VM the compute pool's helper spins on the other core after every kernel, which
        # slows the next layer's io_submit
        self.compute_threads = compute_threads

        # ---- the file ----
        t0 = time.perf_counter()
        if weights is None:  # the FFN lives only in the file (written beforehand)
            if path is None:
                raise ValueError("FlashFFN without weights needs the path of its weight file")
            self.path = Path(path)
            self.header, self.rebuilt = open_layout(self.path, verify=verify), False
            self.fingerprint = self.header.fingerprint
            g = self.header.geometry
        else:
            layers = layers_of(weights)
            kind = _kind(weights)
            g = geometry_for(layers, kind, bundled, cluster_neurons)
            self.fingerprint = weights_fingerprint(layers, kind)
            self.path = Path(path) if path else self.default_path(cache_dir, g,
                                                                   self.fingerprint)
            self.header, self.rebuilt = ensure_layout(self.path, layers, g, self.fingerprint,
                                                      verify)
            del layers
        self.file_s = time.perf_counter() - t0
        self.geometry = g
        b1, b2 = self._biases()

        # ---- the cache ----
        slot_bytes = g.cluster_neurons * g.bundle_bytes
        if dram_budget_gb is not None:
            budget = dram_budget_gb * GB
        elif dram_budget_fraction is not None:
            if not 0.0 <= dram_budget_fraction <= 1.0:
                raise ValueError(f"dram_budget_fraction must be in [0, 1], got "
                                 f"{dram_budget_fraction}")
            budget = dram_budget_fraction * g.neuron_bytes_total
        else:
            raise ValueError("give dram_budget_gb or dram_budget_fraction")
        self.budget_bytes = float(budget)
        freqs = None
        if profile is not None:
            freqs = cluster_frequencies(profile, g.n_clusters, g.cluster_neurons)
        elif hot_fraction > 0:
            warnings.warn("FlashFFN got no ActivationProfile (context `profile=`): no hot "
                          "segment, the whole DRAM budget is LRU", RuntimeWarning, stacklevel=2)
        plan = plan_segments(freqs, g.n_layers, g.n_clusters, int(budget // slot_bytes),
                             hot_fraction)
        self.cache = SegmentedNeuronCache(plan, g.n_clusters)
        self.reader = DirectReader(self.path, io_threads=io_threads, direct=direct,
                                   max_read_bytes=max_read_kb * 1024,
                                   engine=io_engine, depth=io_depth,  # type: ignore[arg-type]
                                   submit_thread=io_submit_thread)
        self.pipeline = LayerPipeline(self.header, self.cache, self.reader, self.ops, b1, b2,
                                      overlap=pipeline, planner=compiled_plan)
        # lookahead: the predictors' guess of layer l+1's neurons from layer l's input
        # (`predictors.lookahead(l + 1, x)`), read while layer l computes
        self.lookahead = bool(lookahead)
        if self.lookahead:
            if not callable(getattr(self.predictors, "lookahead", None)):
                raise ValueError("lookahead needs predictors with a lookahead(layer, x) method")
            if not self.pipeline.enable_lookahead():
                raise ValueError("lookahead needs native AIO reads of bundled, block-aligned "
                                 "clusters (io_engine aio/auto, O_DIRECT, bundled)")
        t0 = time.perf_counter()
        self.pipeline.load_hot()
        if preload_lru and freqs is not None:  # warm start: the next most frequent clusters
            for layer in range(g.n_layers):
                order = np.argsort(-freqs[layer], kind="stable")
                units, slots = self.cache.preload(layer, order[: len(plan.hot[layer])
                                                              + plan.lru[layer]])
                self.pipeline.load(layer, units, slots)
            if self.pipeline.planner is not None:
                self.pipeline.planner.sync()  # the LRU order the preload stamped
        self.load_s = time.perf_counter() - t0  # start-up reads (hot + warm LRU)
        self.load_bytes = self.reader.stats.bytes_read
        self.d_ffn = g.d_ffn
        self.n_layers = g.n_layers
        self.reset_counters()

    @staticmethod
    def default_path(cache_dir: str | None, g: Any, fingerprint: str) -> Path:
        from powerbench.paths import cache_dir as default_cache

        root = Path(cache_dir) if cache_dir else default_cache() / "flash"
        mode = "bundled" if g.bundled else "unbundled"
        return root / (f"{g.kind}-L{g.n_layers}-d{g.d_model}-f{g.d_ffn}-{g.dtype}-{mode}"
                       f"-c{g.cluster_neurons}-{fingerprint}.pbflash")

    def _biases(self) -> tuple[list[Tensor] | None, list[Tensor] | None]:
        """Biases stay in DRAM (a few KB per layer); read from the file's bias block."""
        g, h = self.geometry, self.header
        if not g.has_bias:
            return None, None
        with open(self.path, "rb") as f:
            f.seek(h.bias_offset)
            vec = torch.frombuffer(bytearray(f.read(g.bias_bytes)), dtype=torch.float32)
        step = g.d_ffn + g.d_model
        b1 = [vec[i * step: i * step + g.d_ffn].clone() for i in range(g.n_layers)]
        b2 = [vec[i * step + g.d_ffn: (i + 1) * step].clone() for i in range(g.n_layers)]
        return b1, b2

    # ---- the FFN ---------------------------------------------------------------------------------
    def __call__(self, layer_idx: int, x: Tensor, observer: Any = None) -> Tensor:
        prompt = 0 < self.dense_from_rows <= x.shape[0]
        if prompt:
            ids = torch.arange(self.d_ffn, dtype=torch.int64)
        else:
            ids = self.predictors.predict(layer_idx, x).to(torch.int64)
        before = self.reader.stats.bytes_read
        ahead = None
        if self.lookahead and not prompt:
            def ahead() -> Tensor | None:
                return self.predictors.lookahead(layer_idx + 1, x)
        if self.compute_threads is None:
            y = self.pipeline.run(layer_idx, x, ids, cache_misses=not prompt, count=not prompt,
                                  ahead=ahead)
        else:
            threads = torch.get_num_threads()
            torch.set_num_threads(self.compute_threads)
            try:
                y = self.pipeline.run(layer_idx, x, ids, cache_misses=not prompt,
                                      count=not prompt, ahead=ahead)
            finally:
                torch.set_num_threads(threads)
        read = self.reader.stats.bytes_read - before
        if prompt:
            self.prompt_bytes += read
            self.prompt_calls += 1
        else:
            self.decode_bytes += read
            self.decode_calls += 1
            self.active_sum += int(ids.numel())
        if y.dtype != x.dtype:
            y = y.to(x.dtype)
        if observer is not None:
            mask = torch.zeros(x.shape[0], self.d_ffn, dtype=torch.bool, device=x.device)
            mask[:, ids] = True
            observer.record(layer_idx, x, mask)
        return y

    def rewind(self) -> None:
        """A new generation starts: idealised predictors replay, the counters restart (the
        cache stays warm), so `metrics()` describes the latest run."""
        rewind = getattr(self.predictors, "rewind", None)
        if rewind is not None:
            rewind()
        self.reset_counters()

    def reset_counters(self) -> None:
        if self.pipeline.planner is not None:
            self.pipeline.planner.counts[:] = 0
        self.cache.stats.reset()
        self.pipeline.times.reset()
        self.reader.stats.reset()
        self.decode_bytes = self.prompt_bytes = 0
        self.decode_calls = self.prompt_calls = self.active_sum = 0

    def metrics(self) -> dict[str, float]:
        """Since the last `rewind()`. Per token = per decode step (all layers; with a batch,
        one step of every sequence); hit rates are shares of the decode steps' clusters
        looked up; `flash_read_gb_s` = bytes read / time reads were in flight."""
        if self.pipeline.planner is not None:
            self.pipeline.planner.flush_counts()
        s, t, r = self.cache.stats, self.pipeline.times, self.reader.stats
        steps = self.decode_calls / self.n_layers
        out = {
            "flash_bytes_read_per_token": self.decode_bytes / steps if steps else 0.0,
            "flash_prompt_bytes_read": float(self.prompt_bytes),
            "flash_hit_rate": s.hit_rate,
            "flash_hit_rate_hot": s.hot_hit_rate,
            "flash_hit_rate_lru": s.lru_hit_rate,
            "flash_evictions": float(s.evicted),
            "flash_bypassed": float(s.bypassed),
            "flash_io_wait_s": t.io_wait_s,
            "flash_io_active_s": t.io_active_s,
            "flash_compute_s": t.compute_s,
            "flash_install_s": t.install_s,
            "flash_plan_s": t.plan_s,
            "flash_submit_s": t.submit_s,
            "flash_read_gb_s": r.bytes_read / t.io_active_s / GB if t.io_active_s else 0.0,
            "flash_reads": float(r.reads),
            "flash_prefetched": float(t.prefetched),
            "flash_prefetch_used": float(t.prefetch_used),
            "flash_direct_io": float(self.reader.direct),
            "flash_aio": float(self.reader.engine == "aio"),
            "flash_queue_depth": float(self.reader.depth),
            "flash_budget_gb": self.budget_bytes / GB,
            "flash_cache_gb": self.cache.n_slots * self.geometry.cluster_neurons
            * self.geometry.bundle_bytes / GB,
            "flash_scratch_gb": self.geometry.n_clusters * self.geometry.cluster_neurons
            * self.geometry.bundle_bytes / GB,
            "flash_hot_share": self.cache.n_hot / max(self.cache.n_slots, 1),
            "flash_file_gb": self.header.file_bytes / GB,
        }
        if self.decode_calls:
            out["sparse_computed_fraction"] = self.active_sum / (self.decode_calls * self.d_ffn)
        if isinstance(self.predictors, ReplayedActiveSets):
            p = self.predictors
            out["oracle_replayed_share"] = p.replayed / max(p.replayed + p.asked, 1)
        return out

    def close(self) -> None:
        self.pipeline.close()
        self.reader.close()
