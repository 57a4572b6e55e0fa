"""The experiment pipeline: model -> data -> profile -> predictors -> placement ->
simulator (cost model) and/or engine (measured) -> evaluation.

Takes the typed `PowerbenchConfig` (converted once by the entry point). Each stage is a
small function; every stage's metrics are logged to MLflow and written to
`<out_dir>/metrics.json` as soon as they exist, so a later failure loses nothing measured.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container, as_yaml
from powerbench.paths import check_cache_writable
from powerbench.progress import format_seconds
from powerbench.tracking import Tracker
from powerbench.tracking.naming import job_swept_values, run_name

log = logging.getLogger(__name__)


@dataclass
class RunContext:
    cfg: PowerbenchConfig
    cache: Path
    out_dir: Path
    tracker: Tracker
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def record(self, metrics: dict[str, float]) -> None:
        """Keep, log and persist metrics right away."""
        clean = {k: float(v) for k, v in metrics.items() if v is not None}
        self.metrics.update(clean)
        (self.out_dir / "metrics.json").write_text(json.dumps(self.metrics, indent=1))
        self.tracker.log_metrics(clean)  # after the file: tracking never costs a result

    def artifact(self, path: Path, subdir: str | None = None) -> None:
        self.tracker.log_artifact(path, subdir)

    def note(self, text: str) -> None:
        log.info(text)
        self.notes.append(text)


def timed(ctx: RunContext, stage: str, fn: Callable[[], Any]) -> Any:
    """Run one stage, log its duration (`stage_<stage>_s`) and say so when it was slow."""
    start = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - start
    ctx.record({f"stage_{stage}_s": seconds})
    if seconds >= 10:
        log.info("stage %s done in %s", stage, format_seconds(seconds))
    return value


def guarded(ctx: RunContext, loaded, stage: str, fn: Callable[[], Any]) -> Any:
    """`timed`, with the model's layer outputs checked for NaN/inf (powerbench.model.guard;
    a shape-only model has none to check, and runs without torch)."""
    if not loaded.has_weights:
        return timed(ctx, stage, fn)
    from powerbench.model.guard import finite_guard

    with finite_guard(loaded.model, stage):
        return timed(ctx, stage, fn)


# ---- stages ------------------------------------------------------------------------------

def stage_model(ctx: RunContext):
    from powerbench.model.loading import LoadedModel

    loaded: LoadedModel = build(ctx.cfg.model, cache_dir=ctx.cache)
    if loaded.model is not None:
        from powerbench.model.guard import check_finite_weights

        check_finite_weights(loaded.model, "model")
    spec = loaded.spec
    ctx.tracker.set_tags({"model_source": loaded.source, "ffn_kind": spec.ffn_kind.value})
    ctx.record({"model_params": spec.total_params, "model_layers": spec.n_layers,
                "model_d_ffn": spec.d_ffn})
    report_fn = getattr(loaded, "report", None)
    if report_fn:
        ctx.record(report_fn)
    return loaded


def stage_data(ctx: RunContext):
    from powerbench.dataset import load_texts

    split = load_texts(ctx.cfg.dataset)
    ctx.record({"dataset_train_docs": len(split.train), "dataset_heldout_docs": len(split.heldout)})
    return split


def stage_profile(ctx: RunContext, loaded, split):
    from powerbench.profiling.activation_profile import ActivationProfile

    if loaded.has_weights:
        from powerbench.profiling.store import load_or_profile

        profile, hit = load_or_profile(loaded, split.train, ctx.cfg.profiling, split.name,
                                       ctx.cache, seed=ctx.cfg.seed)
        ctx.note(f"activation profile: measured on {profile.n_tokens} tokens "
                 f"({'cache hit' if hit else 'profiled now'})")
    else:
        from powerbench.profiling.synthetic import synthetic_profile

        profile = synthetic_profile(loaded.spec, trace_tokens=ctx.cfg.profiling.trace_tokens,
                                    seed=ctx.cfg.seed)
        ctx.note("activation profile: SYNTHETIC, fitted to published statistics "
                 f"({loaded.spec.stats.source if loaded.spec.stats else 'defaults'})")
    assert isinstance(profile, ActivationProfile)
    ctx.tracker.set_tags({"profile_source": profile.source})
    ctx.record(profile.summary())
    table = ctx.out_dir / "profile_layers.csv"
    rows = ["layer,neurons,sparsity,skew_top80_share"] + [
        f"{layer.index},{layer.n_neurons},{layer.sparsity:.6f},{layer.skew(0.8):.6f}"
        for layer in profile.layers]
    table.write_text("\n".join(rows) + "\n")
    ctx.artifact(table, "profile")
    return profile


def stage_placement(ctx: RunContext, loaded, profile, hardware,
                    predictor_bytes: float | None = None):
    from powerbench.solver import solve, write_artifacts

    bench = ctx.cfg.bench
    context = ctx.cfg.solver.context or bench.prompt_tokens + bench.new_tokens
    placement = solve(ctx.cfg.solver, loaded.spec, profile, hardware,
                      weight_dtype=ctx.cfg.model.weight_dtype, context=context,
                      predictor_bytes=predictor_bytes)
    ctx.record(placement.metrics(profile))
    for path in write_artifacts(placement, profile, ctx.out_dir / "placement").values():
        ctx.artifact(path, "placement")
    return placement


def stage_predictors(ctx: RunContext, loaded, profile, split):
    from powerbench.evaluation.predictor_stage import prepare_predictors

    predictors, metrics, files = prepare_predictors(
        ctx.cfg.predictor, loaded, profile, ctx.cache, ctx.out_dir,
        calibration_texts=split.train if split is not None else None,
        seq_len=ctx.cfg.eval.seq_len)
    ctx.record(metrics)
    for path in files:
        ctx.artifact(path, "predictors")
    return predictors


def stage_sized_predictors(ctx: RunContext, loaded, profile):
    """Shape-only model: predictors sized by the strategy's rule, charged at the quality our
    trained predictors reach (powerbench.predictor.sized); none for dense strategies."""
    from powerbench.predictor.sized import quality_from_config, size_predictors

    quality = quality_from_config(ctx.cfg.simulator)
    sized = size_predictors(ctx.cfg.predictor, loaded.spec, profile, quality)
    if sized is not None:
        ctx.record(sized.metrics(loaded.spec))
        ctx.note(f"predictors: SIZED by the {sized.strategy} rule (shape-only model, not "
                 f"trained); quality from {quality.source}")
    return sized


def stage_engine(ctx: RunContext, loaded, split, **context):
    from powerbench.engine import run_engine

    result = run_engine(ctx.cfg.engine, loaded, split.heldout, ctx.cfg.bench, **context)
    record_backend(ctx, result.extra.get("backend"))
    ctx.record(result.metrics)
    if getattr(result, "texts", None):
        ctx.tracker.log_text("\n\n---\n\n".join(result.texts), "engine/samples.txt")
    return result


def record_backend(ctx: RunContext, actual: str | None) -> None:
    """Tag the sparse backend that actually ran; when it is not the one configured (e.g.
    engine=sparse_cuda without a GPU falls back to sparse_cpu) tag the fallback and rename
    the run after what ran."""
    if actual is None:
        return
    requested = getattr(getattr(ctx.cfg.engine, "ffn", None), "backend", actual)
    ctx.tracker.set_tags({"engine_backend": actual})
    if actual != requested:
        ctx.tracker.set_tags({"engine_fallback": f"{requested}->{actual}"})
        name = ctx.tracker.run_name or ""
        ctx.tracker.rename(name.replace(ctx.cfg.engine.name, actual) if ctx.cfg.engine.name
                           in name else f"{name}-{actual}")
        ctx.note(f"engine: backend {requested} unavailable here; {actual} ran (tagged "
                 f"engine_fallback={requested}->{actual})")


def stage_eval(ctx: RunContext, loaded, split, predictors=None):
    """Held-out perplexity and multiple-choice accuracy, dense and (with predictors) sparse."""
    from powerbench.evaluation.accuracy import run_accuracy_eval

    ev = ctx.cfg.eval
    report = run_accuracy_eval(loaded.model, loaded.tokenizer, predictors, split.heldout,
                               seq_len=ev.seq_len, max_tokens=ev.max_tokens,
                               mc_task=ev.mc_task, mc_items=ev.mc_items, seed=ctx.cfg.seed)
    ctx.record(report.metrics())
    return report


# ---- driver -------------------------------------------------------------------------------

def run_experiment(cfg: PowerbenchConfig, out_dir: Path, tags: dict[str, str] | None = None,
                   tracker: Tracker | None = None) -> RunContext:
    """Run the pipeline for the typed `cfg`, results under `out_dir` and in MLflow
    (`tracker`: one already built from `cfg.tracking`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tracker = tracker if tracker is not None else build(cfg.tracking)
    cache = check_cache_writable(cfg.cache_dir)  # a real write, before any stage
    choices, swept = _choices(cfg)
    ctx = RunContext(cfg=cfg, cache=cache, out_dir=out_dir, tracker=tracker)
    (out_dir / "config.yaml").write_text(as_yaml(cfg))
    run_tags = {**{f"cfg_{k}": str(v) for k, v in choices.items()}, **(tags or {})}
    with tracker.run(run_name(choices, swept), tags=run_tags):
        tracker.log_params(as_container(cfg))
        tracker.log_artifact(out_dir / "config.yaml")
        run_stages(ctx)
    return ctx


def run_stages(ctx: RunContext) -> None:
    from powerbench.hardware import load_hardware
    from powerbench.predictor.stats import predictor_layer_bytes
    from powerbench.simulator.stage import record_infeasible, simulate_stage
    from powerbench.solver import PlacementInfeasibleError

    cfg = ctx.cfg
    loaded = timed(ctx, "model", lambda: stage_model(ctx))
    split = timed(ctx, "data", lambda: stage_data(ctx)) if loaded.has_weights else None
    profile = guarded(ctx, loaded, "profile", lambda: stage_profile(ctx, loaded, split))
    predictors = None
    if cfg.predictor is not None and loaded.has_weights:
        predictors = guarded(ctx, loaded, "predictors",
                             lambda: stage_predictors(ctx, loaded, profile, split))
    elif cfg.predictor is not None and cfg.simulator is not None:
        predictors = timed(ctx, "predictors",
                           lambda: stage_sized_predictors(ctx, loaded, profile))
    predictor_bytes = predictor_layer_bytes(predictors)
    placement = None
    if cfg.solver is not None and cfg.hardware is not None:
        hardware = load_hardware(cfg.hardware, cache_dir=ctx.cache)
        try:
            placement = timed(ctx, "placement", lambda: stage_placement(
                ctx, loaded, profile, hardware, predictor_bytes))
        except PlacementInfeasibleError as err:
            if cfg.simulator is None:
                raise
            record_infeasible(ctx, err)  # "does not fit" is a result; the sweep goes on
        if placement is not None and cfg.simulator is not None:
            timed(ctx, "simulator", lambda: simulate_stage(ctx, loaded, profile, placement,
                                                           hardware, predictors))
    if cfg.engine is None:
        return
    if not loaded.has_weights:
        ctx.note(f"measured engine and evaluation skipped: {loaded.spec.name} is shape-only "
                 "(no weights here); simulator=cost_model estimates its speed for a hardware "
                 "profile")
        return
    context = {"predictors": predictors, "placement": placement, "profile": profile}
    timed(ctx, "engine", lambda: stage_engine(ctx, loaded, split, **context))
    guarded(ctx, loaded, "eval", lambda: stage_eval(ctx, loaded, split, predictors))


def _choices(cfg: PowerbenchConfig) -> tuple[dict[str, str | None], list[str]]:
    """The chosen option of each config group, e.g. {"model": "tiny_relu", ...}, and the
    values this job of a sweep takes (e.g. ["new_tokens=8"]; empty outside a sweep)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hydra = HydraConfig.get()
        choices = hydra.runtime.choices
        return ({k: v for k, v in choices.items() if "/" not in k and "@" not in k},
                job_swept_values(hydra.overrides.task))
    except ValueError:
        return {g: getattr(getattr(cfg, g), "name", None)
                for g in ("model", "engine", "simulator") if getattr(cfg, g) is not None}, []
