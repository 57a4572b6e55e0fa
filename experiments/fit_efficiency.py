"""Fit the cost model's GPU kernel-efficiency factors to issue 15's calibration set.

    PYTHONPATH=. python experiments/fit_efficiency.py [--top 5]
        [--set pc_high:hardware.memories.vram.capacity_gb=24 ...]

The calibration set is the `calibration=True` Published rows of the fig10/11/12/13/18
targets (powerbench.reproduce) and nothing else. The script composes the runs those rows
read (each target's sweep as `powerbench reproduce` runs it, narrowed by READS), builds
each model, profile, sized predictors and placement ONCE (placements do not depend on
`simulator.efficiency`: `solve` never receives the simulator config), then re-costs every
run with `simulate` at each grid point (its `work_cache`: the FFN work is computed once)
and scores the rows with the targets' own tables and `powerbench.reproduce.report.compare`.

Grid: gpu_dense, gpu_sparse, int4 in 0.2..1.0 step 0.1 (9 x 9 x 9); cpu_sparse (measured)
and cpu_dense stay as conf/simulator/cost_model.yaml has them. Objective: the worst
|error| / tolerance over the calibration rows (<= 1: every row within its tolerance).
Exact branch and bound: runs with fp16 weights never read the int4 factor, so the rows of
all-fp16 targets bound a (gpu_dense, gpu_sparse) pair from below for every int4 value.
`--set HW:KEY=VALUE` adds a Hydra override to every run on hardware profile HW.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from powerbench.build import build
from powerbench.config.compose import as_container, hydra_context, load_config
from powerbench.hardware import load_hardware
from powerbench.predictor.sized import quality_from_config, size_predictors
from powerbench.predictor.stats import predictor_layer_bytes
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.reproduce import TARGETS, Target
from powerbench.reproduce.report import Comparison, compare
from powerbench.simulator.config import ComputeMode, KernelEfficiency
from powerbench.simulator.simulate import simulate
from powerbench.solver import PlacementInfeasibleError, solve
from powerbench.tracking.tracker import flatten

CALIBRATION = ("fig10", "fig11", "fig12", "fig13", "fig18")
GRID = tuple(round(0.2 + 0.1 * i, 1) for i in range(9))
# the runs the calibration rows read (their `published` filters); the others are left out
READS: dict[str, dict[str, str]] = {
    "fig10": {"bench.prompt_tokens": "64"},
    "fig11": {"bench.prompt_tokens": "64"},
    "fig13": {"hardware": "pc_high"},
    "fig18": {"model": "opt_30b", "bench.prompt_tokens": "1"},
}
Point = tuple[float, float, float]  # gpu_dense, gpu_sparse, int4


@dataclass
class Job:
    """One run of a target's sweep: its typed config, params and efficiency-free inputs."""

    target: str
    cfg: Any
    params: dict[str, str]
    inputs: tuple | None = None  # (spec, profile, placement, hardware, predictors); None: infeasible
    work_cache: dict = field(default_factory=dict)
    results: dict[tuple, dict[str, float]] = field(default_factory=dict)

    @property
    def int4(self) -> bool:
        return str(self.cfg.model.weight_dtype) == "int4"

    @property
    def sparse(self) -> bool:
        return self.cfg.simulator.mode is ComputeMode.sparse

    def reads(self, point: Point) -> tuple:
        """The factors this run's costs read (fp16 weights: not int4; dense: not gpu_sparse)."""
        gd, gs, i4 = point
        return gd, gs if self.sparse else None, i4 if self.int4 else None


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
    return [r for r in runs if _read(target.name, r)]


def _read(name: str, overrides: Sequence[str]) -> bool:
    given = dict(o.split("=", 1) for o in overrides)
    return all(given.get(k, v) == v for k, v in READS.get(name, {}).items())


def compose_jobs(names: Iterable[str], hw_sets: dict[str, list[str]]) -> list[Job]:
    jobs = []
    for name in names:
        for overrides in sweep_overrides(TARGETS[name]):
            cfg = load_config([*overrides, "tracking=disabled"])
            extra = hw_sets.get(cfg.hardware.name, [])
            if extra:
                cfg = load_config([*overrides, "tracking=disabled", *extra])
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
        hardware = load_hardware(cfg.hardware)
        context = cfg.solver.context or cfg.bench.prompt_tokens + cfg.bench.new_tokens
        # what solve() reads: no simulator.* key (its efficiency never reaches a placement)
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


def metrics(job: Job, point: Point, base: KernelEfficiency) -> dict[str, float]:
    """The run's logged metrics at `point` (memoised on the factors the run reads)."""
    key = job.reads(point)
    if key not in job.results:
        if job.inputs is None:
            job.results[key] = {"sim_feasible": 0.0}
        else:
            gd, gs, i4 = point
            sim = replace(job.cfg.simulator,
                          efficiency=replace(base, gpu_dense=gd, gpu_sparse=gs, int4=i4))
            spec, profile, placement, hardware, sized = job.inputs
            result = simulate(sim, spec, profile, placement, hardware, predictors=sized,
                              bench=job.cfg.bench, work_cache=job.work_cache)
            job.results[key] = {"sim_feasible": 1.0, **result.metrics}
    return job.results[key]


def runs_frame(jobs: list[Job], point: Point, base: KernelEfficiency) -> pd.DataFrame:
    """The jobs as `mlflow.search_runs` would return their runs."""
    return pd.DataFrame([{**{f"params.{k}": v for k, v in job.params.items()},
                          **{f"metrics.{k}": v for k, v in metrics(job, point, base).items()},
                          "start_time": i} for i, job in enumerate(jobs)])


def rows(jobs: list[Job], names: Iterable[str], point: Point,
         base: KernelEfficiency) -> list[Comparison]:
    """The calibration rows of targets `names` at `point`."""
    out = []
    for name in names:
        target = TARGETS[name]
        assert target.table is not None, f"target {name} has no table-from-runs function"
        table = target.table(runs_frame([j for j in jobs if j.target == name], point, base))
        out += [c for c in compare(target, table) if c.published.calibration]
    return out


def scores(comparisons: list[Comparison]) -> tuple[float, ...]:
    """|error| / tolerance of each row, worst first (inf: a row cannot be evaluated); tuples
    compare as minimax with ties broken by the next-worst row (leximax)."""
    return tuple(sorted((abs(c.error) / c.published.tolerance if math.isfinite(c.error)
                         else math.inf for c in comparisons), reverse=True))


Ranked = list[tuple[tuple[float, ...], Point, list[Comparison]]]


def search(jobs: list[Job], base: KernelEfficiency, top: int) -> Ranked:
    """The `top` grid points by leximax score (exact branch and bound)."""
    fp16 = [n for n in CALIBRATION if all(not j.int4 for j in jobs if j.target == n)]
    bounds = sorted((scores(rows(jobs, fp16, (gd, gs, GRID[0]), base))[0], (gd, gs))
                    for gd in GRID for gs in GRID)
    best: list[tuple[tuple[float, ...], Point, list[Comparison]]] = []
    for bound, (gd, gs) in bounds:
        if len(best) >= top and bound > best[-1][0][0]:
            break
        for i4 in GRID:
            comparisons = rows(jobs, CALIBRATION, (gd, gs, i4), base)
            best.append((scores(comparisons), (gd, gs, i4), comparisons))
        best = sorted(best, key=lambda b: b[0])[:top]
    return best


def report(best: Ranked, current: list[Comparison], point: Point) -> str:
    lines = [f"{'gpu_dense':>9} {'gpu_sparse':>10} {'int4':>5}  |err|/tol of the 3 worst rows"]
    lines += [f"{p[0]:9.1f} {p[1]:10.1f} {p[2]:5.1f}  " + " ".join(f"{x:.3f}" for x in w[:3])
              for w, p, _ in best]
    for title, comps in ((f"best point {best[0][1]}", best[0][2]), (f"current {point}", current)):
        lines += ["", title, f"  {'row':74} {'paper':>7} {'ours':>8} {'error':>8}  within"]
        for c in comps:
            err = f"{c.error:+.3f}" if c.published.absolute else f"{100 * c.error:+.1f}%"
            lines.append(f"  {c.published.label[:74]:74} {c.published.value:7.3g} "
                         f"{c.ours:8.4g} {err:>8}  {'yes' if c.within else 'NO'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=5, help="grid points to print")
    parser.add_argument("--set", action="append", default=[], metavar="HW:KEY=VALUE",
                        help="Hydra override for every run on hardware profile HW")
    args = parser.parse_args(argv)
    hw_sets: dict[str, list[str]] = {}
    for item in args.set:
        hw, override = item.split(":", 1)
        hw_sets.setdefault(hw, []).append(override)
    start = time.perf_counter()
    jobs = compose_jobs(CALIBRATION, hw_sets)
    prepare(jobs)
    print(f"{len(jobs)} runs composed and placed in {time.perf_counter() - start:.0f} s"
          f"{'; overrides ' + str(hw_sets) if hw_sets else ''}")
    base = jobs[0].cfg.simulator.efficiency
    current = (base.gpu_dense, base.gpu_sparse, base.int4)
    t = time.perf_counter()
    rows(jobs, CALIBRATION, current, base)
    print(f"one grid point (every run simulated once) in {time.perf_counter() - t:.1f} s")
    best = search(jobs, base, args.top)
    print(report(best, rows(jobs, CALIBRATION, current, base), current))
    print(f"\n{sum(len(j.results) for j in jobs)} simulate calls, "
          f"{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
