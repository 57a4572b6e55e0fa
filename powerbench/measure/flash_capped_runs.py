"""A model larger than the memory it may use: `engine=flash` against llama.cpp's mmap,
both in the same memory cap, on the same bytes, in interleaved rounds.

`run_capped(exp)` for one `CappedExperiment`:
1. refuses to start (`InsufficientDiskSpace`, with the numbers) when the disk holding
   `work_dir` lacks the bytes of the files still to write (checked before any write);
2. writes the FFN weight file(s) streamed layer by layer
   (`powerbench.flash.synthetic_file`), and for the peer an F16 GGUF of the same shape
   streamed tensor by tensor (`powerbench.engine.llamacpp.random_llama_gguf`);
3. measures the disk's random-read ceiling on those files (AIO batches of random reads of
   the engine's cluster size, up to 128 in flight, and of 512 KB, up to 32): the best
   bandwidth, before and after the rounds;
4. per round (the order alternates), the flash engine in a spawned process in a fresh
   memory cgroup of `cap_bytes` (`powerbench.measure.flash_capped_worker`: every `FlashRun` in
   turn, dense parts drawn once per round), then llama.cpp (llama-cpp-python, mmap, in its
   own torch-free process, started once in its own cgroup of the same limit, idle while
   the flash process runs and only then) on the same prompt ids and lengths, threads;
5. deletes the large files unless `keep_files`.

SYNTHETIC WEIGHTS: only speed and traffic mean anything; the tokens are not compared.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from powerbench.load_window import LoadWindow
from powerbench.measure.flash_capped_worker import FlashJob, FlashRun, Sparsity, flash_worker
from powerbench.measure.memory_cap import MemoryCap
from powerbench.model.spec import ModelSpec

GB = 1e9
DISK_MARGIN_BYTES = 2 * 10**9  # left free on the disk beyond the files


class InsufficientDiskSpace(RuntimeError):
    """The disk cannot hold the experiment's files (the message has the numbers)."""


@dataclass(frozen=True)
class CappedExperiment:
    name: str
    spec: ModelSpec
    dtype: str  # fp16 | fp32
    seed: int
    work_dir: Path
    cap_bytes: int  # the memory cgroup limit of each engine's process
    sparsities: tuple[Sparsity, ...]
    runs: tuple[FlashRun, ...]
    llamacpp: bool  # the llama.cpp peer (F16 GGUF, mmap)
    prompt_tokens: int = 4
    new_tokens: int = 5
    rounds: int = 2
    threads: int = 2
    predictor_rank: int = 64
    hot_fraction: float = 0.5
    slack_bytes: int = 512 * 10**6
    keep_files: bool = False

    def flash_path(self, bundled: bool) -> Path:
        return self.work_dir / (f"{self.name}-{self.dtype}-seed{self.seed}-"
                                f"{'bundled' if bundled else 'unbundled'}.pbflash")

    @property
    def gguf_path(self) -> Path:
        return self.work_dir / f"{self.name}-f16-seed{self.seed}.gguf"


@dataclass
class CappedReport:
    exp: CappedExperiment
    results: list[dict[str, Any]]  # one per engine run and round (with "round")
    ceiling: dict[str, float]  # bytes/s: "cluster" (the engine's read size), "512K", "best"
    model_bytes: int
    file_bytes: dict[str, int]
    load: LoadWindow  # UTC time and load average around the whole run
    cap_stats: list[dict[str, Any]] = field(default_factory=list)
    mem_available: int = 0  # the machine's MemAvailable at the start (bytes)


def model_bytes(spec: ModelSpec, itemsize: int = 2) -> int:
    """Weight bytes of `spec` with a tied embedding / LM head (as both engines hold it)."""
    hd = spec.head_dim
    attn = spec.d_model * hd * (2 * spec.n_heads + 2 * spec.n_kv_heads)
    ffn = (2 if spec.ffn_kind.value == "relu" else 3) * spec.d_model * spec.d_ffn
    return itemsize * (spec.n_layers * (attn + ffn) + spec.vocab_size * spec.d_model)


def planned_files(exp: CappedExperiment) -> dict[Path, int]:
    """Every large file the experiment writes, with its size in bytes."""
    from powerbench.engine.synthetic import torch_dtype
    from powerbench.flash.synthetic_file import synthetic_geometry

    out: dict[Path, int] = {}
    for bundled in sorted({r.bundled for r in exp.runs}, reverse=True):
        g = synthetic_geometry(exp.spec, torch_dtype(exp.dtype), bundled)
        out[exp.flash_path(bundled)] = g.file_bytes
    if exp.llamacpp:
        out[exp.gguf_path] = model_bytes(exp.spec, 2) + 64 * 10**6  # + metadata, norms
    return out


def check_disk(exp: CappedExperiment, files: dict[Path, int]) -> None:
    """Raise `InsufficientDiskSpace` (before anything is written) when the disk holding
    `work_dir` cannot take the files still missing plus `DISK_MARGIN_BYTES`."""
    probe = exp.work_dir
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    missing = {p: n for p, n in files.items() if not p.is_file()}

    def still_to_write(path: Path, n: int) -> int:  # what a partial write holds on disk
        partial = path.with_name(path.name + ".partial")
        return n - partial.stat().st_blocks * 512 if partial.is_file() else n  # (sparse)

    need = sum(max(still_to_write(p, n), 0) for p, n in missing.items())
    if need + DISK_MARGIN_BYTES > free:
        listing = ", ".join(f"{p.name} {n / GB:.1f} GB" for p, n in missing.items())
        raise InsufficientDiskSpace(
            f"{exp.name}: needs {need / GB:.1f} GB for its files ({listing}) + "
            f"{DISK_MARGIN_BYTES / GB:.0f} GB margin, but {probe} has {free / GB:.1f} GB free")


def prepare_files(exp: CappedExperiment, log: Callable[[str], None] = print) -> dict[str, int]:
    """Write (or reuse) the experiment's files; returns their sizes by name."""
    from powerbench.engine.llamacpp import random_llama_gguf
    from powerbench.engine.synthetic import torch_dtype
    from powerbench.flash.synthetic_file import synthetic_flash_file

    files = planned_files(exp)
    check_disk(exp, files)
    exp.work_dir.mkdir(parents=True, exist_ok=True)
    for bundled in sorted({r.bundled for r in exp.runs}, reverse=True):
        t0 = time.perf_counter()
        synthetic_flash_file(exp.spec, torch_dtype(exp.dtype), exp.seed, exp.flash_path(bundled),
                             bundled=bundled)
        log(f"{exp.name}: flash file ({'bundled' if bundled else 'unbundled'}) ready in "
            f"{time.perf_counter() - t0:.0f} s")
    if exp.llamacpp:
        t0 = time.perf_counter()
        random_llama_gguf(exp.spec, exp.gguf_path, exp.seed)
        log(f"{exp.name}: GGUF ready in {time.perf_counter() - t0:.0f} s")
    return {p.name: p.stat().st_size for p in files}


def measure_ceiling(exp: CappedExperiment) -> dict[str, float]:
    """The best random-read bandwidth (bytes/s) on the experiment's own files."""
    from powerbench.engine.synthetic import torch_dtype
    from powerbench.flash.aio import batch_curve
    from powerbench.flash.synthetic_file import synthetic_geometry

    g = synthetic_geometry(exp.spec, torch_dtype(exp.dtype), True)
    path = exp.flash_path(True) if exp.flash_path(True).is_file() else exp.flash_path(False)
    curve = batch_curve(path, g.cluster_bytes, 128, 0.4)
    cluster = max((bw for _, bw in curve), default=0.0)
    big_file = exp.gguf_path if exp.llamacpp else path
    big = max((bw for _, bw in batch_curve(big_file, 512 * 1024, 32, 0.4)), default=0.0)
    out = {"cluster": cluster, "512K": big, "best": max(cluster, big),
           "cluster_bytes": float(g.cluster_bytes)}
    out |= {f"batch{b}": bw for b, bw in curve}  # the cluster-size curve, batch by batch
    return out


def run_flash_job(job: FlashJob, cap_bytes: int, name: str,
                  log: Callable[[str], None] = print) -> tuple[list[dict], dict]:
    """`flash_worker` in a spawned process inside a fresh memory cgroup of `cap_bytes`."""
    ctx = mp.get_context("spawn")
    with MemoryCap(name, cap_bytes) as cap:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=flash_worker, args=(replace(job, cgroup=str(cap.path)), child),
                           daemon=True)
        proc.start()
        child.close()
        results: list[dict] = []
        while True:
            if parent.poll(5.0):
                msg = parent.recv()
                if msg is None:
                    break
                if "trace" in msg:
                    raise RuntimeError(f"flash worker failed: {msg['error']}\n{msg['trace']}")
                results.append(msg)
                log(f"  flash {msg['label']}: {msg['tokens_per_s']:.3f} tok/s, "
                    f"{msg['read_bytes_per_token'] / 1e6:.0f} MB/token read, peak RSS "
                    f"{msg['peak_rss'] / GB:.2f} GB (limit {msg['rss_limit'] / GB:.2f})")
                if "error" in msg:
                    break
            elif not proc.is_alive():
                stats = cap.stats()
                raise RuntimeError(f"flash worker exited with code {proc.exitcode} (memory cap "
                                   f"{cap_bytes / GB:.2f} GB: peak {stats.max_usage_bytes / GB:.2f}"
                                   f" GB, OOM kills {stats.oom_kills})")
        proc.join(60)
        stats = cap.stats()
    return results, {"engine": "flash", "limit_bytes": stats.limit_bytes,
                     "max_usage_bytes": stats.max_usage_bytes, "failcnt": stats.failcnt,
                     "oom_kills": stats.oom_kills}


def run_capped(exp: CappedExperiment, log: Callable[[str], None] = print) -> CappedReport:
    """See the module docstring."""
    import torch

    from powerbench.engine.llamacpp import LlamaCppProcess, llamacpp_available
    from powerbench.measure.page_cache_usage import drop_page_cache

    if exp.llamacpp and not llamacpp_available():  # before writing any file
        raise RuntimeError("the llama.cpp peer needs llama-cpp-python, which is not installed: "
                           "run `make llamacpp` once (it compiles llama.cpp), or set "
                           "task.llamacpp=false to measure engine=flash alone")
    window = LoadWindow().__enter__()
    from powerbench.measure.resident_memory import memory_available

    sizes = prepare_files(exp, log)
    mem_available = memory_available()
    ceilings = [measure_ceiling(exp)]
    job = FlashJob(spec=exp.spec, dtype=exp.dtype, seed=exp.seed,
                   files={b: str(exp.flash_path(b)) for b in {r.bundled for r in exp.runs}},
                   runs=exp.runs, sparsities=exp.sparsities, prompt_tokens=exp.prompt_tokens,
                   new_tokens=exp.new_tokens, threads=exp.threads,
                   predictor_rank=exp.predictor_rank, hot_fraction=exp.hot_fraction,
                   slack_bytes=exp.slack_bytes)
    ids = torch.randint(0, exp.spec.vocab_size, (1, exp.prompt_tokens + exp.new_tokens),
                        generator=torch.Generator().manual_seed(exp.seed + 11))
    prompt = [int(t) for t in ids[0, :exp.prompt_tokens]]
    results: list[dict[str, Any]] = []
    cap_stats: list[dict[str, Any]] = []
    llama_cap = llama = None
    try:
        if exp.llamacpp:
            drop_page_cache(exp.gguf_path)
            llama_cap = MemoryCap(f"powerbench-{exp.name}-llamacpp-{os.getpid()}", exp.cap_bytes)
            t0 = time.perf_counter()
            llama = LlamaCppProcess(exp.gguf_path, exp.threads,
                                    n_ctx=exp.prompt_tokens + exp.new_tokens + 8,
                                    preexec_fn=llama_cap.join)
            log(f"{exp.name}: llama.cpp loaded in {time.perf_counter() - t0:.0f} s")
        for r in range(exp.rounds):
            order = ["flash", "llama.cpp"] if r % 2 == 0 else ["llama.cpp", "flash"]
            for engine in order:
                if engine == "flash":
                    got, st = run_flash_job(job, exp.cap_bytes,
                                            f"powerbench-{exp.name}-flash-{os.getpid()}-{r}", log)
                    results += [dict(x, round=r) for x in got]
                    cap_stats.append(dict(st, round=r))
                    if any("error" in x for x in got):
                        raise RuntimeError(next(x["error"] for x in got if "error" in x))
                elif llama is not None and llama_cap is not None:
                    llama_cap.reset_peak()
                    _, timing = llama.generate(prompt, exp.new_tokens)
                    steps, reads = timing.step_s, timing.step_read_bytes or []
                    st = llama_cap.stats()
                    results.append({
                        "engine": "llama.cpp", "label": "llama.cpp mmap (dense)", "round": r,
                        "tokens_per_s": timing.decode_tokens_per_s, "step_s": steps,
                        "prefill_s": timing.prefill_s,
                        "read_bytes_per_token": sum(reads) / max(len(reads), 1),
                        "prefill_read_bytes": timing.prefill_read_bytes,
                        "cap_peak": st.max_usage_bytes})
                    cap_stats.append({"engine": "llama.cpp", "round": r,
                                      "limit_bytes": st.limit_bytes,
                                      "max_usage_bytes": st.max_usage_bytes,
                                      "failcnt": st.failcnt, "oom_kills": st.oom_kills})
                    log(f"  llama.cpp: {timing.decode_tokens_per_s:.3f} tok/s, "
                        f"{results[-1]['read_bytes_per_token'] / 1e6:.0f} MB/token read")
    finally:
        if llama is not None:
            llama.close()
        if llama_cap is not None:
            llama_cap.close()
    ceilings.append(measure_ceiling(exp))
    ceiling = {k: max(c[k] for c in ceilings) for k in ceilings[0]}
    window.__exit__()
    if not exp.keep_files:
        for path in planned_files(exp):
            path.unlink(missing_ok=True)
    return CappedReport(exp=exp, results=results, ceiling=ceiling,
                        model_bytes=model_bytes(exp.spec), file_bytes=sizes,
                        load=window, cap_stats=cap_stats, mem_available=mem_available)
