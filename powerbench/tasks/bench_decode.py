"""`powerbench bench-decode`: dense vs sparse decoders side by side (measure.decode_bench).

With `model@task.synthetic_model=<model>` (a model yaml with a `spec`, e.g. opt_6_7b) the
decoders run that real shape with SYNTHETIC seeded random weights (`task.dtype`,
`task.layers`, `powerbench.engine.synthetic`) and active sets replayed from the synthetic
profile's trace: only the speed is meaningful; the achieved GB/s are set against this
machine's DRAM read bandwidth measured in the same run.

Reports through the measurement harness (study `decode`): the table, a CSV and JSON in the
run directory, one MLflow run; `task.publish=true` also writes results/decode/.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from powerbench.config import PowerbenchConfig, as_container
from powerbench.engine import build_prompt_batch
from powerbench.evaluation.predictor_stage import prepare_predictors
from powerbench.measure.decode_bench import build_engines, run_decode_bench, with_knob_variants
from powerbench.measure.harness import Report, run_benchmark
from powerbench.tasks.config import BenchDecodeTask
from powerbench.tasks.inputs import model_inputs

DECODE_COLUMNS = ("engine", "predictor", "decode_tokens_per_s", "decode_tokens_per_s_p10",
                  "decode_tokens_per_s_p90", "speedup_vs_dense", "decode_tokens_per_s_best",
                  "speedup_best_vs_dense", "ffn_us_per_call", "ffn_speedup_vs_dense",
                  "computed_fraction", "weight_mb_per_token", "achieved_gbps")


def bench_decode(task: BenchDecodeTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    measure = bench_decode_synthetic if task.synthetic_model else bench_decode_model
    return run_benchmark(cfg, out_dir, lambda: measure(task, cfg, out_dir), task.publish)


def bench_decode_model(task: BenchDecodeTask, cfg: PowerbenchConfig, out_dir: Path) -> Report:
    """Our decoder with the configured model's trained weights: dense vs each predictor."""
    inputs = model_inputs(cfg)
    cache, loaded, split, profile = inputs.cache, inputs.loaded, inputs.split, inputs.profile
    sets, pbytes = {}, {}
    for name, predictor in chosen_predictors(task, cfg).items():
        sets[name], metrics, _ = prepare_predictors(
            predictor, loaded, profile, cache, out_dir / "predictors" / name,
            calibration_texts=split.train, seq_len=cfg.eval.seq_len)
        pbytes[name] = int(metrics.get("predictor_param_bytes", 0))
    if task.unfused:
        pbytes[f"{task.unfused} unfused"] = pbytes[task.unfused]
    engines = build_engines(loaded, task.predictors, sets, task.backend, task.unfused,
                            task.torch_linear_baseline)
    engines = with_knob_variants(engines, pbytes, task.variants or ())
    bench = cfg.bench
    ids = build_prompt_batch(loaded.tokenizer, split.heldout, bench.prompt_tokens,
                             bench.batch_size)
    rows = run_decode_bench(ids, engines, pbytes, task.rounds, bench.new_tokens, bench.threads)
    return Report(
        study="decode", name=loaded.spec.name, rows=[asdict(r) for r in rows],
        key=("engine", "predictor"), columns=DECODE_COLUMNS, metrics=DECODE_COLUMNS[2:],
        title=f"decode, {loaded.spec.name}: dense vs sparse ({rows[0].threads} thread(s), "
              f"batch {bench.batch_size}, prompt {bench.prompt_tokens}, {bench.new_tokens} new "
              f"tokens, {task.rounds} rounds)",
        params={"model": loaded.spec.name, "bench": as_container(bench),
                "task": as_container(task)})


def chosen_predictors(task: BenchDecodeTask, cfg: PowerbenchConfig) -> dict[str, Any]:
    """Name -> typed predictor config of `task.predictors` and `task.unfused`, from the
    configs Hydra composed into `task.predictor_configs`; the experiment's own `predictor`
    (with its command-line overrides) where its name is one of them."""
    names = sorted(set(task.predictors) | ({task.unfused} if task.unfused else set()))
    unknown = [n for n in names if n not in task.predictor_configs]
    if unknown:
        raise ValueError(f"task.predictors / task.unfused: {unknown} not among the composed "
                         f"predictor configs; valid: {sorted(task.predictor_configs)} (conf/task/"
                         "bench_decode.yaml lists them)")
    own = getattr(cfg.predictor, "name", None)
    return {n: cfg.predictor if n == own else task.predictor_configs[n] for n in names}


SYNTHETIC_NOTE = ("synthetic weights: only speed is meaningful (seeded random weights; the "
                  "tokens they produce are not; sparse active sets replayed from the synthetic "
                  "activation profile's trace)")


def bench_decode_synthetic(task: BenchDecodeTask, cfg: PowerbenchConfig, out_dir: Path) -> Report:
    """Dense vs sparse on a real shape with synthetic weights (see the module docstring)."""
    from powerbench.measure.decode_bench import build_synthetic_engines
    from powerbench.ops.bandwidth import cpu_read_bandwidth
    from powerbench.tasks.inputs import synthetic_inputs
    from powerbench.threads import torch_threads

    assert task.synthetic_model is not None
    bench = cfg.bench
    inputs = synthetic_inputs(
        task.synthetic_model, task.layers, task.dtype, task.seed,
        bench, announce=lambda full, spec: print(
            f"{SYNTHETIC_NOTE}\nbuilding {spec.name}: {spec.n_layers} of {full.n_layers} "
            f"layers, d_model {spec.d_model}, d_ffn {spec.d_ffn}, vocab {spec.vocab_size}, "
            f"{task.dtype}"))
    full, spec, weights, build_s = inputs.full, inputs.spec, inputs.weights, inputs.build_s
    profile, ids = inputs.trace, inputs.ids
    engines, pbytes = build_synthetic_engines(weights, profile, task.backend,
                                              task.predictor_rank, task.seed,
                                              task.torch_linear_baseline)
    engines = with_knob_variants(engines, pbytes, task.variants or ())
    with torch_threads(bench.threads):  # the reference: read before and after, the best kept
        before = cpu_read_bandwidth()
    rows = run_decode_bench(ids, engines, pbytes, task.rounds, bench.new_tokens, bench.threads)
    with torch_threads(bench.threads):
        after = cpu_read_bandwidth()
    dram = max(before, after, key=lambda b: b.gbps)
    weight_gb = sum(t.numel() * t.element_size() for t in _tensors(weights)) / 1e9
    shape = {"weights": "synthetic", "model": spec.name, "dtype": task.dtype,
             "layers": spec.n_layers, "model_layers": full.n_layers, "d_model": spec.d_model,
             "d_ffn": spec.d_ffn,
             "token_sparsity": spec.stats.token_sparsity if spec.stats else None,
             "prompt_tokens": bench.prompt_tokens, "new_tokens": bench.new_tokens,
             "dram_gbps": dram.gbps, "dram_method": dram.method,
             "dram_gbps_before": before.gbps, "dram_gbps_after": after.gbps}
    table = []
    for r in rows:
        row = {**shape, **asdict(r)}
        row["bandwidth_fraction"] = r.achieved_gbps / dram.gbps
        row["achieved_gbps_best"] = _best_gbps(r)
        row["bandwidth_fraction_best"] = row["achieved_gbps_best"] / dram.gbps
        table.append(row)
    return Report(
        study="decode", name=f"realsize_{spec.name}_{task.dtype}_{spec.n_layers}of{full.n_layers}",
        rows=table, key=("engine", "predictor"),
        columns=(*DECODE_COLUMNS, "bandwidth_fraction", "bandwidth_fraction_best"),
        metrics=(*DECODE_COLUMNS[2:], "bandwidth_fraction", "bandwidth_fraction_best",
                 "dram_gbps"),
        title=f"decode, {spec.name} shape (synthetic weights), {task.dtype}, {spec.n_layers} of "
              f"{full.n_layers} layers, {rows[0].threads} thread(s), {task.rounds} rounds",
        notes=[SYNTHETIC_NOTE,
               f"layers kept from the profile: {profile.layer_ids}; {weight_gb:.2f} GB of "
               f"weights built in {build_s:.0f} s; batch {bench.batch_size}, prompt "
               f"{bench.prompt_tokens}, {bench.new_tokens} new tokens",
               f"DRAM read bandwidth {dram.gbps:.1f} GB/s ({dram.method}, same threads, best of "
               f"{before.gbps:.1f} before and {after.gbps:.1f} after the rounds); "
               "bandwidth_fraction = weights read per token x tokens/s / that bandwidth "
               "(median round; _best: fastest round)"],
        params={**shape, "bench": as_container(bench), "task": as_container(task)})


def _best_gbps(row: Any) -> float:
    """Achieved GB/s of a row's fastest round (weights read per token x its tokens/s)."""
    return row.weight_mb_per_token * 1e6 * row.decode_tokens_per_s_best / row.batch / 1e9


def _tensors(w: Any) -> list[Any]:
    """Every distinct weight tensor of a DecoderWeights (shared ones once)."""
    import torch

    seen: dict[int, Any] = {}
    stack = [w]
    while stack:
        node = stack.pop()
        if isinstance(node, torch.Tensor):
            seen.setdefault(id(node), node)
        elif isinstance(node, list):
            stack.extend(node)
        elif hasattr(node, "__dataclass_fields__"):
            stack.extend(getattr(node, f) for f in node.__dataclass_fields__)
    return list(seen.values())
