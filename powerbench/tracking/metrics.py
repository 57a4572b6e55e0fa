"""The one registry of MLflow metric names: every metric any run logs is declared here.

`Tracker.log_metrics` checks each name against it (`metric_spec`); an unknown name is a
warning, and an error where $POWERBENCH_STRICT_METRICS=1 (the test suite sets it), so a
new metric cannot ship undocumented. docs/metrics.md is generated from this table
(`powerbench docs`). A name may hold `{placeholders}` for families whose middle part is
data (a predictor, a variant): `{predictor}_decode_tokens_per_s`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache

STRICT_ENV = "POWERBENCH_STRICT_METRICS"


class UnknownMetricError(KeyError):
    """A metric name that is not in powerbench.tracking.metrics.METRICS."""


@dataclass(frozen=True)
class Metric:
    name: str  # exact name, or a pattern with {placeholders}
    unit: str
    description: str


def _m(name: str, unit: str, description: str) -> Metric:
    return Metric(name, unit, description)


# section title (who logs them) -> metrics
METRICS: dict[str, tuple[Metric, ...]] = {
    "Pipeline stages (powerbench.pipeline)": (
        _m("stage_{stage}_s", "s", "wall time of a pipeline stage: model, data, profile, "
           "predictors, placement, simulator, engine, eval"),
    ),
    "Model (model stage)": (
        _m("model_params", "count", "parameters of the model"),
        _m("model_layers", "count", "decoder layers"),
        _m("model_d_ffn", "count", "FFN hidden width (neurons per layer)"),
        _m("tiny_train_time_s", "s", "tiny_relu: training time (when it was trained)"),
        _m("tiny_heldout_perplexity", "ppl", "tiny_relu: held-out perplexity after training"),
        _m("tiny_unigram_perplexity", "ppl", "tiny_relu: unigram perplexity of the same text "
           "(the bar a trained model must beat)"),
    ),
    "Dataset (data stage)": (
        _m("dataset_train_docs", "count", "training documents after cleaning"),
        _m("dataset_heldout_docs", "count", "held-out documents (prompts, evaluation)"),
        _m("dataset_train_chars", "chars", "characters in the training documents"),
        _m("dataset_heldout_chars", "chars", "characters in the held-out documents"),
    ),
    "Activation profile (profile stage)": (
        _m("ffn_sparsity", "share", "mean share of FFN neurons inactive per token"),
        _m("ffn_skew_top80_share", "share", "share of neurons (per layer) holding 80% of the "
           "activations: lower is more skewed"),
        _m("ffn_model_skew_top80_share", "share", "the same over the whole model"),
        _m("profile_tokens", "count", "tokens the profile was measured (or drawn) on"),
    ),
    "Predictors (predictors stage)": (
        _m("predictor_recall", "share", "active neurons found / active neurons (test split, "
           "pooled over layers)"),
        _m("predictor_recall_min", "share", "lowest per-layer recall"),
        _m("predictor_precision", "share", "predicted neurons that were active"),
        _m("predicted_active_fraction", "share", "neurons predicted active per token"),
        _m("true_active_fraction", "share", "neurons actually active per token"),
        _m("predictor_param_count", "count", "predictor parameters, all layers"),
        _m("predictor_param_bytes", "bytes", "predictor weights in their storage dtype"),
        _m("predictor_param_share", "share", "predictor parameters / model parameters"),
        _m("predictor_train_s", "s", "training time summed over layers"),
        _m("predictor_train_s_total", "s", "training time including every sizing round"),
        _m("predictor_build_s", "s", "wall time to build the predictor set"),
        _m("predictor_mean_rank", "count", "mean hidden width of the layer predictors"),
        _m("predictor_max_rank", "count", "largest hidden width"),
        _m("predictor_target_recall", "share", "the recall the strategy aimed for"),
        _m("predictor_cache_hit", "0/1", "1 when the predictors came from the cache"),
        _m("predictor_converged", "0/1", "adaptive: met the perplexity tolerance"),
        _m("predictor_ppl_rounds", "count", "adaptive: perplexity-driven sizing rounds"),
        _m("predictor_target_sparsity", "share", "threshold predictor: target sparsity"),
        _m("predictor_calibration_sparsity", "share", "threshold predictor: sparsity reached "
           "on the calibration text"),
    ),
    "Placement (placement stage, powerbench.solver)": (
        _m("gpu_neuron_load_share", "share", "activation load (profile-weighted) on the GPU"),
        _m("gpu_neuron_share", "share", "neurons placed on the GPU"),
        _m("gpu_weight_bytes", "bytes", "weights placed on the GPU"),
        _m("cpu_weight_bytes", "bytes", "weights placed on the CPU"),
        _m("gpu_total_bytes", "bytes", "GPU memory used (weights, KV cache, predictors)"),
        _m("cpu_total_bytes", "bytes", "CPU memory used"),
        _m("gpu_ffn_bytes", "bytes", "FFN weights on the GPU"),
        _m("gpu_layers", "count", "layers with any part on the GPU"),
        _m("gpu_attention_layers", "count", "layers whose attention runs on the GPU"),
        _m("cl_violations", "count", "communication-constraint violations of the placement"),
        _m("solve_time_s", "s", "solver wall time"),
        _m("solver_objective", "s", "the solver's objective (estimated time per token)"),
        _m("solver_gap", "share", "ILP optimality gap at the end of the solve"),
        _m("placement_shortfall_gb", "GB", "memory missing when nothing fits (sim_feasible 0)"),
        _m("pi2_dram_budget_gb", "GB", "PowerInfer-2 planner: DRAM budget"),
        _m("pi2_dram_used_gb", "GB", "PowerInfer-2 planner: DRAM used"),
        _m("pi2_resident_ffn_share", "share", "FFN weights resident in DRAM"),
        _m("pi2_ffn_in_flash", "0/1", "1 when FFN weights are served from flash"),
        _m("pi2_cluster_neurons", "count", "neurons per flash cluster"),
        _m("pi2_hot_clusters", "count", "clusters pinned hot in DRAM"),
        _m("pi2_lru_clusters", "count", "clusters in the LRU neuron cache"),
        _m("pi2_compute_gflops", "GFLOP/s", "compute rate of the chosen cores"),
        _m("pi2_io_cores", "count", "cores issuing flash reads"),
        _m("pi2_io_core_class", "code", "class of the I/O cores (0 little, 1 mid, 2 big)"),
    ),
    "Simulator (simulator stage; SIMULATED numbers for a hardware profile)": (
        _m("sim_feasible", "0/1", "1 when the placement fits the hardware"),
        _m("sim_decode_tokens_per_s", "tok/s", "simulated decode speed"),
        _m("sim_prefill_tokens_per_s", "tok/s", "simulated prefill speed"),
        _m("sim_end_to_end_tokens_per_s", "tok/s", "generated tokens / (prefill + decode)"),
        _m("sim_decode_ms", "ms", "simulated decode time"),
        _m("sim_prefill_ms", "ms", "simulated prefill time"),
        _m("sim_decode_latency_ms_p50", "ms", "median simulated decode step"),
        _m("sim_decode_latency_ms_p90", "ms", "90th percentile simulated decode step"),
        _m("sim_gpu_bytes_per_step", "bytes", "bytes the GPU reads per decode step"),
        _m("sim_cpu_bytes_per_step", "bytes", "bytes the CPU reads per decode step"),
        _m("sim_gpu_compute_share", "share", "decode compute done on the GPU"),
        _m("sim_gpu_ffn_load_share", "share", "FFN load served by the GPU"),
        _m("sim_gpu_neuron_load_share", "share", "neuron activation load on the GPU"),
        _m("sim_ffn_cpu_bound_share", "share", "layers whose FFN waits on the CPU"),
        _m("sim_hybrid_layers", "count", "layers split between GPU and CPU"),
        _m("sim_predictor_bytes", "bytes", "predictor weights charged"),
        _m("sim_predictor_time_share", "share", "share of the simulated inference time spent "
           "running the predictors (PowerInfer Fig. 17)"),
        _m("sim_predictor_param_share", "share", "predictor parameters / model parameters"),
        _m("sim_predictor_rank_mean", "count", "mean predictor width charged"),
        _m("sim_prefill_dense_gpu", "0/1", "1 when prefill runs dense on the GPU"),
        _m("sim_prefill_npu", "0/1", "1 when prefill runs on the NPU (phone)"),
        _m("sim_prefill_flash_bytes", "bytes", "flash bytes read during prefill (phone)"),
        _m("sim_flash_bytes_per_token", "bytes", "flash bytes read per decoded token"),
        _m("sim_flash_reads_per_token", "count", "flash reads per decoded token"),
        _m("sim_flash_ms_per_token", "ms", "flash read time per token"),
        _m("sim_flash_hit_rate", "share", "neuron-cache hit rate"),
        _m("sim_flash_hit_rate_hot", "share", "hits in the pinned hot part"),
        _m("sim_flash_hit_rate_lru", "share", "hits in the LRU part"),
        _m("sim_flash_io_bound_share", "share", "decode steps waiting on flash"),
        _m("sim_flash_resident_ffn_share", "share", "FFN weights resident in DRAM"),
        _m("sim_cpu_sparse_call_us", "µs", "calibrated sparse operator call overhead"),
    ),
    "Engine (engine stage; MEASURED on this machine, powerbench.engine.timing)": (
        _m("decode_tokens_per_s", "tok/s", "measured decode speed (median of the repeats)"),
        _m("prefill_tokens_per_s", "tok/s", "measured prefill speed"),
        _m("decode_ms", "ms", "decode time"),
        _m("prefill_ms", "ms", "prefill time"),
        _m("decode_latency_ms_p50", "ms", "median decode step"),
        _m("decode_latency_ms_p90", "ms", "90th percentile decode step"),
        _m("best_decode_tokens_per_s", "tok/s", "fastest repeat's decode speed"),
        _m("best_prefill_tokens_per_s", "tok/s", "fastest repeat's prefill speed"),
        _m("end_to_end_tokens_per_s", "tok/s", "generated tokens / (prefill + decode)"),
        _m("sparse_computed_fraction", "share", "sparse FFN: neurons computed per call"),
        _m("oracle_replayed_share", "share", "oracle predictor: active sets replayed from the "
           "profile instead of computed"),
        _m("hybrid_gpu_neuron_load_share", "share", "hybrid engine: neurons computed on GPU"),
        _m("hybrid_gpu_neurons_per_call", "count", "hybrid engine: GPU neurons per call"),
        _m("hybrid_cpu_neurons_per_call", "count", "hybrid engine: CPU neurons per call"),
        _m("hybrid_cpu_ffn_ms_per_call", "ms", "hybrid engine: CPU FFN time per call"),
        _m("hybrid_gpu_ffn_ms_per_decode_call", "ms", "hybrid engine: GPU part of a decode "
           "call, CUDA-event time on its stream"),
        _m("hybrid_cpu_ffn_ms_per_decode_call", "ms", "hybrid engine: CPU part of a decode "
           "call, host wall time"),
        _m("hybrid_gpu_resident_neuron_share", "share", "hybrid engine: neurons on the GPU"),
        _m("flash_{statistic}", "mixed", "flash engine (powerbench.flash.ffn.FlashFFN.metrics): "
           "bytes_read_per_token, prompt_bytes_read, hit_rate(_hot/_lru), evictions, bypassed, "
           "io_wait_s, io_active_s, compute_s, install_s, plan_s, submit_s, read_gb_s, reads, "
           "prefetched, prefetch_used, direct_io, aio, queue_depth, budget_gb, cache_gb, "
           "scratch_gb, hot_share, file_gb"),
    ),
    "Evaluation (eval stage; MEASURED)": (
        _m("perplexity", "ppl", "held-out perplexity of the evaluated model (sparse when "
           "predictors are set)"),
        _m("perplexity_dense", "ppl", "held-out perplexity, dense"),
        _m("perplexity_delta_pct", "%", "sparse vs dense perplexity"),
        _m("eval_tokens", "count", "held-out tokens scored"),
        _m("eval_predictor_recall", "share", "predictor recall on the held-out text"),
        _m("eval_predicted_active_fraction", "share", "predicted active share, held out"),
        _m("eval_true_active_fraction", "share", "true active share, held out"),
        _m("mc_accuracy", "share", "multiple-choice accuracy (sparse when predictors are set)"),
        _m("mc_accuracy_dense", "share", "multiple-choice accuracy, dense"),
        _m("mc_items", "count", "multiple-choice items scored"),
    ),
    "Validation: measured vs simulated (validate, hybrid-local; powerbench.measure.twin)": (
        _m("sim_error_pct", "%", "simulated vs measured decode speed"),
        _m("sim_error_paired_pct", "%", "the same, paired round by round"),
        _m("sim_error_best_pct", "%", "simulated vs the fastest measured repeat"),
        _m("sim_prefill_error_pct", "%", "simulated vs measured prefill speed"),
        _m("sim_prefill_error_paired_pct", "%", "the same, paired round by round"),
        _m("sim_prefill_error_best_pct", "%", "simulated vs the fastest measured prefill"),
        _m("sim_end_to_end_error_pct", "%", "simulated vs measured end-to-end speed"),
        _m("ops_attention", "FLOP", "counted attention operations per token"),
        _m("ops_ffn", "FLOP", "counted FFN operations per token"),
        _m("ops_token", "FLOP", "counted LM-head operations per token"),
        _m("hw_{quantity}", "mixed", "the hardware profile simulated (cpu_bw_gb_s, "
           "cpu_capacity_gb, cpu_gflops, gpu_bw_gb_s, gpu_capacity_gb, h2d_gb_s, d2h_gb_s, "
           "sync_us, launch_us)"),
        _m("host_load_avg_1m_{when}", "load", "1-minute load average before / after"),
        _m("gpu_budget_mb", "MB", "hybrid-local: GPU memory the placement may use"),
    ),
    "Benchmarks and the tour (bench-*, tour; MEASURED unless named sim_)": (
        _m("{predictor}_decode_tokens_per_s", "tok/s", "bench-decode: decode speed of one "
           "decoder (dense, or sparse with a predictor)"),
        _m("{predictor}_speedup_vs_dense", "x",
           "bench-decode: speed / dense speed (the median of the rounds' ratios)"),
        _m("{predictor}_ffn_us_per_call", "µs", "bench-decode: FFN time per call"),
        _m("{predictor}_achieved_gbps", "GB/s", "bench-decode: achieved memory bandwidth"),
        _m("dram_gbps", "GB/s", "measured DRAM bandwidth of this machine"),
        _m("{variant}_tokens_per_s", "tok/s", "bench-flash / bench-threshold / tour: speed of "
           "one variant (engine, precision, sparsity)"),
        _m("ffn_speedup_vs_dense", "x",
           "tour: sparse FFN speed / dense FFN speed (the median of the rounds' ratios)"),
        _m("sim_{system}_gpu_neuron_load_share", "share", "tour: simulated GPU load share "
           "(all weight rows computed per token)"),
        _m("sim_{system}_gpu_ffn_load_share", "share", "tour: simulated GPU load share, FFN "
           "rows only"),
        _m("{row}.{column}", "mixed", "a benchmark report through the measurement harness "
           "(powerbench.measure.harness: bench-decode, bench-threshold, bench-solver, ...): "
           "one metric per report row (its key columns joined by '.') and numeric column, "
           "as in the report's table"),
    ),
    "Paper reproduction (powerbench reproduce; one MLflow run per target)": (
        _m("error/{row}", "mixed", "a published number's error: ours / paper - 1 for speeds, "
           "ours - paper for shares (the row is the report's label)"),
        _m("published_rows", "count", "published numbers the target is compared with"),
        _m("published_within", "count", "of those, within the row's tolerance"),
        _m("wall_seconds", "s", "the target's wall time (its sweep and figure)"),
    ),
}


def all_metrics() -> list[Metric]:
    return [m for group in METRICS.values() for m in group]


@cache
def _compiled() -> tuple[dict[str, Metric], list[tuple[re.Pattern[str], Metric]]]:
    exact, patterns = {}, []
    for metric in all_metrics():
        if "{" in metric.name:
            regex = re.sub(r"\\\{[a-z_]+\\\}", ".+", re.escape(metric.name))
            patterns.append((re.compile(regex), metric))
        else:
            exact[metric.name] = metric
    return exact, patterns


def metric_spec(name: str) -> Metric | None:
    """The registry entry declaring `name` (exact first, then patterns); None if none."""
    exact, patterns = _compiled()
    if name in exact:
        return exact[name]
    return next((m for regex, m in patterns if regex.fullmatch(name)), None)


def unknown_metrics(names: list[str] | tuple[str, ...] | set[str]) -> list[str]:
    return sorted(n for n in names if metric_spec(n) is None)


def strict() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def render_markdown() -> str:
    """docs/metrics.md: every metric, by section (generated: `powerbench docs`)."""
    lines = ["# Metrics", "",
             "Every metric a powerbench run logs to MLflow, by the stage or task that logs it. "
             "Generated from `powerbench/tracking/metrics.py` (the registry every metric is "
             "logged through) by `powerbench docs`; do not edit by hand. `{name}` parts are "
             "data (a stage, predictor or variant). Metrics named `sim_` are SIMULATED for a "
             "hardware profile; the others are measured on the machine that ran.", ""]
    for section, metrics in METRICS.items():
        lines += [f"## {section}", "", "| metric | unit | meaning |", "|---|---|---|"]
        lines += [f"| `{m.name}` | {m.unit} | {m.description} |" for m in metrics]
        lines.append("")
    return "\n".join(lines)
