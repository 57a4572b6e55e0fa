"""`powerbench bench-flash`: PowerInfer-2's flash-offloaded FFN, measured (see
`BenchFlashTask` for the modes). Every mode reports through the measurement harness:
one table, CSV and JSON in the run directory, one MLflow run, results/flash/ only with
`task.publish=true`.

    powerbench bench-flash                                  # in-DRAM-capable shape
    powerbench bench-flash task.mode=capped                 # LLaMA(ReGLU)-13B in a memory cap
    powerbench bench-flash task.mode=lookahead_recall
    powerbench bench-flash task.mode=predict_local task.predict_report=<report.txt>
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from powerbench.config import PowerbenchConfig, as_container
from powerbench.measure.harness import Report, run_benchmark
from powerbench.tasks.config import BenchFlashTask

GB = 1e9
SYNTHETIC = "synthetic weights: only speed and traffic mean anything"


def bench_flash(task: BenchFlashTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    modes: dict[str, Callable[[BenchFlashTask, PowerbenchConfig], Report | list[Report]]] = {
        "ffn": ffn_reports, "capped": capped_reports, "lookahead_recall": recall_report,
        "predict_local": prediction_report}
    if task.mode not in modes:
        raise ValueError(f"task.mode={task.mode!r}: choose one of {', '.join(modes)}")
    return run_benchmark(cfg, out_dir, lambda: modes[task.mode](task, cfg), task.publish)


# ---- mode=ffn: the in-DRAM-capable shape ---------------------------------------------------
def ffn_reports(task: BenchFlashTask, cfg: PowerbenchConfig) -> Report:
    from powerbench.engine.synthetic import synthetic_spec
    from powerbench.measure.flash_ffn_bench import run_flash_bench
    from powerbench.measure.flash_ffn_inputs import BenchShape
    from powerbench.measure.flash_ffn_report import default_variants
    from powerbench.paths import cache_dir

    shape = BenchShape(n_layers=task.layers, d_model=task.d_model, d_ffn=task.d_ffn,
                       dtype=task.dtype)
    decode_spec = synthetic_spec(task.decode_model) if task.decode_model else None
    report = run_flash_bench(shape, default_variants(tuple(task.budgets)), tokens=task.tokens,
                             rounds=task.rounds, warmup=task.warmup, io_threads=task.io_threads,
                             hot_fraction=task.hot_fraction,
                             cache_dir=str(cache_dir(cfg.cache_dir) / "flash"),
                             decode_spec=decode_spec, decode_tokens=task.decode_tokens,
                             seed=task.seed)
    rows = []
    for phase, results in (("ffn_only", report.results), ("decode", report.decode_results)):
        base = results[0].tokens_per_s if results else 0.0
        for r in results:
            m = r.metrics
            rows.append({"phase": phase, "variant": r.variant.name
                         + ("" if r.variant.direct else " (buffered)"),
                         "tokens_per_s": r.tokens_per_s,
                         "x_dram": r.tokens_per_s / base if base else None,
                         "mb_per_token": m.get("flash_bytes_read_per_token", 0.0) / 1e6,
                         "read_gb_s": m.get("flash_read_gb_s"),
                         "hit_hot": m.get("flash_hit_rate_hot"),
                         "hit_lru": m.get("flash_hit_rate_lru"),
                         **report.ceiling(r)})
    targets = report.target_lines()
    print("\n".join(targets), flush=True)
    return Report(study="flash", name=f"bench_{shape.name}", rows=rows,
                  key=("phase", "variant"), title=f"bench-flash, {shape.name} shape ({SYNTHETIC})",
                  columns=("phase", "variant", "tokens_per_s", "x_dram", "mb_per_token",
                           "read_gb_s", "hit_hot", "hit_lru", "reads_per_layer",
                           "ceiling_tokens_per_s_at_batch", "fraction_of_ceiling_at_batch",
                           "ceiling_tokens_per_s_best", "fraction_of_ceiling_best"),
                  notes=targets + report.render().splitlines(),
                  params={"task": as_container(task)})


# ---- mode=capped: a model larger than its memory cap, against llama.cpp ---------------------
def _spec(model: Any, task: BenchFlashTask) -> Any:
    from powerbench.engine.synthetic import synthetic_spec

    return synthetic_spec(model, task.model_layers)


def _sparsity(model: Any, name: str) -> Any:
    """The published sparsity of a typed model config (composed by Hydra: the task yaml)."""
    from powerbench.measure.flash_capped_worker import Sparsity

    if model.stats is None:
        raise ValueError(f"model {model.name} has no `stats` (published sparsity) for the "
                         "capped bench-flash runs")
    stats = model.stats
    return Sparsity(name, float(stats.token_sparsity), f"{model.name}: {stats.source}")


def capped_experiments(task: BenchFlashTask, cfg: PowerbenchConfig) -> list[Any]:
    """The capped-memory comparison of `task.model` and the ablation (typed, composed)."""
    from powerbench.measure.flash_capped_runs import CappedExperiment, model_bytes
    from powerbench.measure.flash_capped_worker import FlashRun
    from powerbench.paths import cache_dir

    if not 0.0 < task.cap_fraction <= 1.0:
        raise ValueError(f"task.cap_fraction must be in (0, 1], got {task.cap_fraction}")
    if task.model is None:
        raise ValueError("task.mode=capped needs a model: model@task.model=<a conf/model option "
                         "with a `spec`>, e.g. llama_reglu_13b")
    work = Path(task.work_dir) if task.work_dir else cache_dir(cfg.cache_dir) / "flash" / "capped"
    spec = _spec(task.model, task)
    cases = [_sparsity(task.model, "published")]
    if task.sparser_model:
        cases.append(_sparsity(task.sparser_model, "sparser"))
    runs = tuple(FlashRun(f"flash {b:g} GB, {c.name} {c.token_sparsity:.0%}", c.name, b)
                 for c in cases for b in task.budgets_gb)
    common = dict(dtype=task.dtype, seed=task.seed, work_dir=work, threads=task.threads,
                  predictor_rank=task.predictor_rank, hot_fraction=task.hot_fraction,
                  slack_bytes=int(task.rss_slack_gb * GB), keep_files=task.keep_files,
                  prompt_tokens=task.prompt_tokens)
    out = [CappedExperiment(name=task.model.name, spec=spec, sparsities=tuple(cases), runs=runs,
                            cap_bytes=int(task.cap_fraction * model_bytes(spec)),
                            llamacpp=task.llamacpp, new_tokens=task.new_tokens,
                            rounds=task.capped_rounds, **common)]
    if task.ablation_model:
        aspec = _spec(task.ablation_model, task)
        case = _sparsity(task.ablation_model, "published")
        parts = 2 if aspec.ffn_kind.value == "relu" else 3
        ffn = 2 * parts * aspec.n_layers * aspec.d_model * aspec.d_ffn
        budget = task.ablation_budget * ffn / GB
        steps = (("page-cache reads", False, False, False, False),
                 ("+Bundle", True, False, False, False),
                 ("+NeuronCache", True, True, True, False),
                 ("+Pipeline", True, True, True, True))
        aruns = tuple(FlashRun(label, case.name, budget, bundled=b, direct=d, cache=c,
                               pipeline=p) for label, b, d, c, p in steps)
        cap = model_bytes(aspec) - ffn + budget * GB + task.ablation_allowance_gb * GB
        out.append(CappedExperiment(name=f"{task.ablation_model.name}_ablation", spec=aspec,
                                    sparsities=(case,), runs=aruns, cap_bytes=int(cap),
                                    llamacpp=False, new_tokens=task.ablation_new_tokens,
                                    rounds=task.ablation_rounds, **common))
    return out


def capped_reports(task: BenchFlashTask, cfg: PowerbenchConfig) -> list[Report]:
    from powerbench.measure.flash_capped_report import render, summary_rows, target_lines
    from powerbench.measure.flash_capped_runs import run_capped

    reports = []
    for exp in capped_experiments(task, cfg):
        ablation = exp.name.endswith("_ablation")
        result = run_capped(exp)
        title = (f"Fig. 14-order ablation, {exp.spec.name} shape, FFN budget "
                 f"{task.ablation_budget:.0%} ({exp.runs[0].budget_gb:.2f} GB), memory cap "
                 f"{exp.cap_bytes / GB:.2f} GB (dense + budget + "
                 f"{task.ablation_allowance_gb:g} GB)" if ablation else
                 f"{exp.spec.name} in a {exp.cap_bytes / GB:.2f} GB memory cap: engine=flash "
                 "vs llama.cpp mmap")
        text = render(result, title, gains=ablation)
        print(text, flush=True)
        rows = summary_rows(result)
        targets = target_lines(rows, ablation=ablation)
        print("\n".join(targets), flush=True)
        columns = ("config", "tokens_per_s", "gain_vs_previous" if ablation else "x_llamacpp",
                   "round_tokens_per_s", "read_mb_per_token", "storage_gb_s",
                   "reads_per_layer", "ceiling_tokens_per_s_at_batch",
                   "fraction_of_ceiling_at_batch", "ceiling_tokens_per_s_best",
                   "fraction_of_ceiling_best", "cache_gb", "peak_rss_gb", "rss_limit_gb",
                   "cgroup_peak_gb", "hit_rate")
        reports.append(Report(
            study="flash", name=("ablation_" if ablation else "capped_") + exp.spec.name,
            rows=rows, key=("config",), title=title, columns=columns,
            notes=text.split("\n\n")[0].splitlines()[1:] + targets,
            params={"task": as_container(task), "experiment": {
                "cap_bytes": exp.cap_bytes, "model_bytes": result.model_bytes,
                "runs": [dataclasses.asdict(r) for r in exp.runs],
                "ceiling": result.ceiling, "cap_stats": result.cap_stats,
                "rounds": result.results}}))
    return reports


# ---- mode=lookahead_recall / predict_local ------------------------------------------------
def recall_report(task: BenchFlashTask, cfg: PowerbenchConfig) -> Report:
    import numpy as np

    from powerbench.measure.flash_lookahead_recall import default_model_dir, lookahead_recall

    model_dir = task.recall_model_dir or str(default_model_dir())
    res = lookahead_recall(model_dir, tuple(task.recall_fractions))
    rows = [{"input": name, "mean": float(np.mean(r)), "median": float(np.median(r)),
             "min": float(np.min(r)), "max": float(np.max(r)),
             "per_layer_pair": " ".join(f"{x:.2f}" for x in r)} for name, r in res.items()]
    return Report(study="flash", name="lookahead_recall", rows=rows, key=("input",),
                  title=f"lookahead recall (= precision), model {Path(model_dir).name}, "
                        "512 tokens of README", params={"task": as_container(task)})


def prediction_report(task: BenchFlashTask, cfg: PowerbenchConfig) -> Report:
    from powerbench.measure.flash_overheads import engine_costs
    from powerbench.measure.flash_prediction import costs_line, parse_report, predict

    if not task.predict_report:
        raise ValueError("task.mode=predict_local needs task.predict_report=<a bench-flash "
                         "mode=ffn report .txt>")
    costs = engine_costs(fit=task.predict_fit)
    table = predict(parse_report(Path(task.predict_report).read_text()), costs=costs)
    return Report(study="flash", name="predict_local", rows=table.to_dict("records"),
                  key=("budget",), title="the simulator's flash tier vs the measured "
                                         "bench-flash report", notes=[costs_line(costs)],
                  params={"task": as_container(task)})
