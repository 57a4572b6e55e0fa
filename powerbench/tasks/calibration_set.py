"""The calibration set re-costed in one process: the runs the `calibration=True` Published
rows of the reproduction targets read, each placed ONCE, then simulated under variants of
the cost model's constants (`powerbench sensitivity`, `powerbench calibration`).

`compose_jobs` composes each calibration target's sweep as `powerbench reproduce` runs it
(narrowed to the runs its calibration rows read); `prepare` builds each distinct model,
synthetic profile, sized predictors and placement once (placements never read
`simulator.*`); `rows(jobs, variant)` simulates every run with the variant's simulator
config and hardware profile (the FFN work is cached per run: it does not depend on the
constants varied here) and scores the rows with the targets' own tables and
`powerbench.reproduce.report.compare`. Hardware variants scale constants with the
placement HELD (a placement solved for the varied profile could differ).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from powerbench.build import build
from powerbench.config.compose import as_container, hydra_context, load_config
from powerbench.hardware import HardwareProfile, load_hardware
from powerbench.predictor.sized import quality_from_config, size_predictors
from powerbench.predictor.stats import predictor_layer_bytes
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.reproduce import TARGETS, Target
from powerbench.reproduce.report import Comparison, compare
from powerbench.simulator.config import SimulatorConfig
from powerbench.simulator.simulate import simulate
from powerbench.solver import PlacementInfeasibleError, solve
from powerbench.tracking.tracker import flatten

CALIBRATION = ("fig10", "fig11", "fig12", "fig13", "fig18")
# the runs the calibration rows read (their `published` filters); the others are left out
READS: dict[str, dict[str, str]] = {
    "fig10": {"bench.prompt_tokens": "64"},
    "fig11": {"bench.prompt_tokens": "64"},
    "fig13": {"hardware": "pc_high"},
    "fig18": {"model": "opt_30b", "bench.prompt_tokens": "1"},
}
# simulator config groups by system: where an experiment's system runs another engine
# than the default cost model (vLLM's per-layer host overhead: conf/simulator/vllm.yaml)
SYSTEM_SIMULATOR = {"vllm": "vllm"}

# (simulator config, hardware profile) of one run -> those the variant simulates with
Variant = Callable[[SimulatorConfig, HardwareProfile], tuple[SimulatorConfig, HardwareProfile]]


def unchanged(sim: SimulatorConfig, hw: HardwareProfile) -> tuple[SimulatorConfig,
                                                                   HardwareProfile]:
    return sim, hw


@dataclass
class Job:
    """One run of a target's sweep: its typed config, params and constant-free inputs."""

    target: str
    cfg: Any
    params: dict[str, str]
    inputs: tuple | None = None  # (spec, profile, placement, hardware, predictors); None: infeasible
    work_cache: dict = field(default_factory=dict)
    results: dict[str, dict[str, float]] = field(default_factory=dict)


def sweep_overrides(target: Target) -> list[list[str]]:
    """Every run of the target's sweeps as Hydra overrides: `hydra.sweeper.params` of its
    experiment with each of `target.sweeps` applied, as `powerbench reproduce` runs them."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with hydra_context():
        hydra_cfg = compose("config", [f"experiment={target.experiment}"],
                            return_hydra_config=True)
    base = {str(k): str(v) for k, v in hydra_cfg.hydra.sweeper.params.items()}
    parser = OverridesParser.create()
    runs = []
    for extra in target.sweeps:
        params = {**base, **dict(o.split("=", 1) for o in extra)}
        axes = []
        for key, value in params.items():
            override = parser.parse_override(f"{key}={value}")
            values = (list(override.sweep_string_iterator()) if override.is_sweep_override()
                      else [override.get_value_element_as_str()])
            axes.append([f"{key}={v}" for v in values])
        runs += [[f"experiment={target.experiment}", *combo] for combo in itertools.product(*axes)]
    return [r for r in runs if _reads(target.name, r)]


def _reads(name: str, overrides: Sequence[str]) -> bool:
    given = dict(o.split("=", 1) for o in overrides)
    return all(given.get(k, v) == v for k, v in READS.get(name, {}).items())


def compose_jobs(names: Iterable[str] = CALIBRATION) -> list[Job]:
    jobs = []
    for name in names:
        for overrides in sweep_overrides(TARGETS[name]):
            given = dict(o.split("=", 1) for o in overrides)
            system = given.get("experiment/system", "")
            extra = ([f"simulator={SYSTEM_SIMULATOR[system]}"] if system in SYSTEM_SIMULATOR
                     else [])
            cfg = load_config([*overrides, *extra, "tracking=disabled"])
            jobs.append(Job(name, cfg, flatten(as_container(cfg))))
    return jobs


def prepare(jobs: list[Job]) -> None:
    """Model, profile, sized predictors and placement of each job, as
    powerbench.pipeline.run_stages builds them, each distinct one once."""
    memo: dict[str, Any] = {}

    def once(key: str, make: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if key not in memo:
            memo[key] = make(*args, **kwargs)
        return memo[key]

    for job in jobs:
        cfg, p = job.cfg, job.params
        spec = once("spec" + _key(p, "model."), lambda m: build(m).spec, cfg.model)
        profile = once("profile" + _key(p, "model.", "profiling.", "seed"), synthetic_profile,
                       spec, trace_tokens=cfg.profiling.trace_tokens, seed=cfg.seed)
        pred_key = _key(p, "model.", "profiling.", "seed", "predictor.",
                        "simulator.predictor_quality.")
        sized = None if cfg.predictor is None else once(
            "pred" + pred_key, size_predictors, cfg.predictor, spec, profile,
            quality_from_config(cfg.simulator))
        hardware = load_hardware(cfg.hardware, cache_dir=cfg.cache_dir)
        context = cfg.solver.context or cfg.bench.prompt_tokens + cfg.bench.new_tokens
        solve_key = f"solve{pred_key}|{_key(p, 'solver.', 'hardware.')}|{context}"
        placement = once(solve_key, _solve, cfg, spec, profile, hardware, context,
                         predictor_layer_bytes(sized))
        job.inputs = None if placement is None else (spec, profile, placement, hardware, sized)


def _key(params: dict[str, str], *prefixes: str) -> str:
    return "|".join(f"{k}={v}" for k, v in sorted(params.items()) if k.startswith(prefixes))


def _solve(cfg: Any, spec: Any, profile: Any, hardware: Any, context: int,
           predictor_bytes: Any) -> Any:
    try:
        return solve(cfg.solver, spec, profile, hardware, weight_dtype=cfg.model.weight_dtype,
                     context=context, predictor_bytes=predictor_bytes)
    except PlacementInfeasibleError:
        return None


def metrics(job: Job, name: str, variant: Variant) -> dict[str, float]:
    """The run's logged metrics under `variant` (memoised by the variant's name)."""
    if name not in job.results:
        if job.inputs is None:
            job.results[name] = {"sim_feasible": 0.0}
        else:
            spec, profile, placement, hardware, sized = job.inputs
            sim, hw = variant(job.cfg.simulator, hardware)
            result = simulate(sim, spec, profile, placement, hw, predictors=sized,
                              bench=job.cfg.bench, work_cache=job.work_cache)
            job.results[name] = {"sim_feasible": 1.0, **result.metrics}
    return job.results[name]


def runs_frame(jobs: list[Job], name: str, variant: Variant) -> pd.DataFrame:
    """The jobs as `mlflow.search_runs` would return their runs."""
    return pd.DataFrame([{**{f"params.{k}": v for k, v in job.params.items()},
                          **{f"metrics.{k}": v for k, v in metrics(job, name, variant).items()},
                          "start_time": i} for i, job in enumerate(jobs)])


def rows(jobs: list[Job], name: str = "base", variant: Variant = unchanged,
         targets: Iterable[str] = CALIBRATION) -> list[Comparison]:
    """The calibration rows of `targets` under `variant` (named `name` for the memo)."""
    out = []
    for target_name in targets:
        target = TARGETS[target_name]
        assert target.table is not None, f"target {target_name} has no table-from-runs function"
        frame = runs_frame([j for j in jobs if j.target == target_name], name, variant)
        out += [c for c in compare(target, target.table(frame)) if c.published.calibration]
    return out


def within_count(comparisons: Sequence[Comparison]) -> int:
    return sum(c.within for c in comparisons)


def row_error(c: Comparison) -> str:
    if not math.isfinite(c.error):
        return "n/a"
    return f"{c.error:+.3f}" if c.published.absolute else f"{100 * c.error:+.1f}%"
