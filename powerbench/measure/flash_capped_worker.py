"""One process decoding with `engine=flash` whose FFN lives only in its file, in a memory cap.

`flash_worker(job, conn)` is the target of a spawned process (`capped_runs.run_flash_job`):
it joins the job's memory cgroup first (everything it maps is charged there), then loads
the decoder's dense parts only (attention, norms, embeddings, LM head: seeded random,
`synthetic_decoder_weights(..., ffn="none")`) and, for each `FlashRun` of the job, builds
a `FlashFFN(weights=None, path=<file>)` with its DRAM budget, decodes `prompt_tokens` +
`new_tokens` tokens and sends one `dict` per run over `conn` (then None). Active sets come
from the synthetic profile's trace of the run's sparsity (`TraceReplay`), with a seeded
low-rank predictor MLP run and charged on every call (`predictor_rank`).

Per run: decode tokens/s ((new_tokens - 1) steps after the prompt, as llama.cpp is
timed), the storage bytes the process read per decode step (/proc/self/io read_bytes),
the peak resident memory (VmHWM, reset before the run) checked against
`ResidentBudget` (the guard: a run above it is reported with the error and the job
stops), the cgroup's peak usage, and the engine's own counters.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powerbench.model.spec import ModelSpec

GB = 1e9


@dataclass(frozen=True)
class Sparsity:
    """An activation sparsity to draw the synthetic profile with."""

    name: str
    token_sparsity: float  # mean fraction of FFN neurons inactive per token
    source: str


@dataclass(frozen=True)
class FlashRun:
    """One engine configuration (the ablation's steps switch the flags off)."""

    label: str
    sparsity: str  # a `Sparsity.name`
    budget_gb: float  # the FFN cache's DRAM (0 with cache=False)
    bundled: bool = True  # which file: bundled or unbundled layout
    direct: bool = True  # O_DIRECT reads (False: through the page cache)
    cache: bool = True  # the segmented neuron cache (False: no cache, every read to scratch)
    pipeline: bool = True  # reads overlapped with the resident neurons' compute


@dataclass(frozen=True)
class FlashJob:
    """Everything a worker needs (picklable)."""

    spec: ModelSpec
    dtype: str  # fp16 | fp32
    seed: int
    files: dict[bool, str]  # bundled? -> the FFN weight file
    runs: tuple[FlashRun, ...]
    sparsities: tuple[Sparsity, ...]
    prompt_tokens: int
    new_tokens: int
    threads: int
    predictor_rank: int
    hot_fraction: float
    slack_bytes: int
    cgroup: str | None = None  # the memory cgroup's directory (joined first)


def _cap_peak(cgroup: str | None, reset: bool = False) -> int:
    if cgroup is None:
        return 0
    path = Path(cgroup) / "memory.max_usage_in_bytes"
    if reset:
        path.write_text("0")
        return 0
    return int(path.read_text())


def _join(cgroup: Path) -> None:
    """Join the cgroup, lowering its limit by what this process already holds (the
    interpreter and imports, charged outside it): the process as a whole gets the cap."""
    from powerbench.measure.resident_memory import rss

    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    limit = cgroup / "memory.limit_in_bytes"
    try:
        limit.write_text(str(int(limit.read_text()) - rss()))
    except OSError:  # the kernel refused a lower limit (e.g. below the usage): keep it
        pass


def flash_worker(job: FlashJob, conn: Any) -> None:
    """The spawned process's body (see the module docstring)."""
    try:
        if job.cgroup is not None:
            _join(Path(job.cgroup))
        _run_job(job, conn)
    except BaseException as err:  # reported to the parent, which raises
        conn.send({"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()})
    finally:
        conn.send(None)
        conn.close()


def _run_job(job: FlashJob, conn: Any) -> None:
    import torch

    from powerbench.engine.decoder import Decoder
    from powerbench.engine.synthetic import TraceReplay, synthetic_decoder_weights, torch_dtype
    from powerbench.flash.ffn import FlashFFN
    from powerbench.measure.page_cache_usage import drop_page_cache
    from powerbench.measure.resident_memory import (
        ResidentBudget,
        ResidentMemoryExceeded,
        peak_rss,
        read_bytes,
        reset_peak_rss,
        rss,
        tensor_bytes,
    )
    from powerbench.profiling.synthetic import synthetic_profile

    torch.set_num_threads(job.threads)
    dtype = torch_dtype(job.dtype)
    baseline = rss()
    t0 = time.perf_counter()
    dense = synthetic_decoder_weights(job.spec, dtype, job.seed, ffn="none")
    dense_s = time.perf_counter() - t0
    dense_bytes = tensor_bytes(dense)
    n_prompt, n_new = job.prompt_tokens, job.new_tokens
    ids = torch.randint(0, job.spec.vocab_size, (1, n_prompt + n_new),
                        generator=torch.Generator().manual_seed(job.seed + 11))
    prompt = ids[:, :n_prompt]
    for sp in job.sparsities:
        runs = [r for r in job.runs if r.sparsity == sp.name]
        if not runs:
            continue
        stats = dataclasses.replace(job.spec.stats, token_sparsity=sp.token_sparsity,
                                    source=sp.source)
        profile = synthetic_profile(dataclasses.replace(job.spec, stats=stats),
                                    trace_tokens=n_prompt + n_new, seed=job.seed)
        for run in runs:
            path = job.files[run.bundled]
            drop_page_cache(path)
            gc.collect()
            reset_peak_rss()
            _cap_peak(job.cgroup, reset=True)
            preds = TraceReplay(profile, rank=job.predictor_rank, d_model=job.spec.d_model,
                                dtype=dtype, seed=job.seed)
            t0 = time.perf_counter()
            ffn = FlashFFN(None, predictors=preds, path=path,
                           dram_budget_gb=run.budget_gb if run.cache else 0.0,
                           hot_fraction=job.hot_fraction, pipeline=run.pipeline,
                           direct=run.direct, profile=profile, dense_from_rows=1 << 30)
            load_s = time.perf_counter() - t0
            dec = Decoder(dense, ffn=ffn)
            cache = dec.new_cache(1, n_prompt + n_new)
            r0, t0 = read_bytes(), time.perf_counter()
            logits = dec.forward(prompt, cache, last_only=True)
            token = logits[:, -1].argmax(-1, keepdim=True)
            prefill_s = time.perf_counter() - t0
            ffn.reset_counters()  # the counters describe the decode steps (trace goes on)
            r1, steps = read_bytes(), []
            for _ in range(n_new - 1):
                t0 = time.perf_counter()
                logits = dec.forward(token, cache, last_only=True)
                token = logits[:, -1].argmax(-1, keepdim=True)
                steps.append(time.perf_counter() - t0)
            r2 = read_bytes()
            peak = peak_rss()
            g = ffn.geometry
            budget = ResidentBudget(
                baseline_bytes=baseline, dense_bytes=dense_bytes + preds.param_bytes,
                cache_bytes=int(ffn.budget_bytes),
                scratch_bytes=g.n_clusters * g.cluster_neurons * g.bundle_bytes,
                slack_bytes=job.slack_bytes)
            m = ffn.metrics()
            result = {
                "engine": "flash", "label": run.label, "run": dataclasses.asdict(run),
                "tokens_per_s": len(steps) / sum(steps) if steps else 0.0,
                "step_s": steps, "prefill_s": prefill_s, "load_s": load_s,
                "dense_s": dense_s, "read_bytes_per_token": (r2 - r1) / max(len(steps), 1),
                "prefill_read_bytes": r1 - r0, "peak_rss": peak, "rss_limit": budget.limit_bytes,
                "rss_budget": budget.describe(), "cap_peak": _cap_peak(job.cgroup),
                "baseline_rss": baseline, "dense_bytes": dense_bytes,
                "predictor_bytes": preds.param_bytes,
                "cache_gb": m["flash_cache_gb"], "hit_rate": m["flash_hit_rate"],
                "hit_hot": m["flash_hit_rate_hot"], "hit_lru": m["flash_hit_rate_lru"],
                "engine_bytes_per_token": m["flash_bytes_read_per_token"],
                "reads_per_token": m["flash_reads"] / max(len(steps), 1),
                "n_layers": g.n_layers,
                "read_gb_s": m["flash_read_gb_s"], "io_wait_s": m["flash_io_wait_s"],
                "compute_s": m["flash_compute_s"], "active_fraction":
                m.get("sparse_computed_fraction", 0.0), "cluster_bytes": g.cluster_bytes,
                "direct_in_effect": ffn.reader.direct}
            ffn.close()
            del dec, ffn, cache, preds
            gc.collect()
            try:
                budget.check(peak)
            except ResidentMemoryExceeded as err:
                result["error"] = str(err)
                conn.send(result)
                return
            conn.send(result)
