"""`powerbench reproduce fig10 [fig12 ...] | all | --list | --quick NAME`: paper targets.

Each named target runs (its sweep or command in a child powerbench,
powerbench.reproduce.target_runner) and its figure is written to <out_dir>/<name>.csv/.png
as soon as its runs exist; each gets its own MLflow run with the figure, the CSV and the
published-vs-ours table (powerbench.reproduce.target_record); then <out_dir>/README.md is
regenerated from every target whose runs exist. <out_dir> is `task.out_dir`, else
results/reproduction/, except for `--quick`: a reduced sweep writes into its run directory
(`reproduction/`), never over the published report. The simulated targets run
`task.parallel_targets` at a time (0: as many as the cores hold with `task.n_jobs` jobs
each), the measured ones alone. `task.fresh_store=true` logs everything to
a new store in this run's directory (what the committed report is generated from);
`task.report_only=true` runs nothing and redraws the figures and the report from the store
(only the named targets when some are named). A
failing target does not stop the others; the task exits non-zero at the end naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.figures.stamp import paper_results_dir
from powerbench.measure.publish import write_results_index
from powerbench.progress import Progress
from powerbench.reproduce import TARGETS, Target
from powerbench.reproduce.report import REPORT, collect, write_report
from powerbench.reproduce.target_record import record_target
from powerbench.reproduce.target_runner import Outcome, RunOptions, run_targets
from powerbench.tasks.config import ReproduceTask
from powerbench.tracking import resolve_uri

ALL = "all"


def select(names: list[str]) -> list[Target]:
    """Targets by name (`all`: every one, in registry order); SystemExit listing the valid
    names for an unknown one or none."""
    unknown = [n for n in names if n != ALL and n not in TARGETS]
    if unknown or not names:
        what = f"unknown target(s) {unknown}" if unknown else "no target named"
        raise SystemExit(f"powerbench reproduce: {what}; choose from {sorted(TARGETS)} or "
                         f"'{ALL}' (powerbench reproduce --list describes them)")
    if ALL in names:
        return list(TARGETS.values())
    return [TARGETS[n] for n in dict.fromkeys(names)]


def listing() -> str:
    """One line per target: name, title, simulated/measured, what runs, published rows."""
    rows = [("name", "kind", "runs", "published", "title")]
    for t in TARGETS.values():
        runs = f"experiment={t.experiment}" if t.experiment else " ".join(t.command)
        if len(t.sweeps) > 1:
            runs += f" ({len(t.sweeps)} sweeps)"
        rows.append((t.name, "simulated" if t.simulated else "measured", runs,
                     str(len(t.published)), t.title))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)),
                                r[4]]) for r in rows)


def command_line(task: ReproduceTask) -> str:
    flags = [f"task.{f}=true" for f in ("fresh_store", "report_only") if getattr(task, f)]
    for option in ("n_jobs", "parallel_targets"):
        if getattr(task, option) != getattr(ReproduceTask, option):
            flags.append(f"task.{option}={getattr(task, option)}")
    return " ".join(["powerbench reproduce", *(["--quick"] if task.quick else []),
                     *task.targets, *flags])


def parallel_targets(task: ReproduceTask, cores: int | None = None) -> int:
    """Simulated targets run at once: `task.parallel_targets`, or when 0 as many as the
    cores hold with `task.n_jobs` jobs each (at least 1)."""
    if task.parallel_targets:
        return task.parallel_targets
    return max(1, (cores or os.cpu_count() or 1) // max(1, task.n_jobs))


def machine(parallel: int = 1) -> str:
    """The report's machine line; it says when targets ran side by side (their wall times
    then overlap)."""
    from powerbench.tracking.provenance import machine_tags

    together = f", simulated targets {parallel} at a time" if parallel > 1 else ""
    return f"run on {machine_tags().get('host_cpu', 'an unknown CPU')}{together}"


def report_dir(task: ReproduceTask, run_dir: Path) -> Path:
    """Where the figures, CSVs and report go: `task.out_dir`; else, for a `--quick` run,
    `<run dir>/reproduction/` (a reduced sweep never replaces the published report); else
    results/reproduction/."""
    if task.out_dir:
        return Path(task.out_dir)
    return run_dir / "reproduction" if task.quick else paper_results_dir()


def reproduce(task: ReproduceTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Outcome]:
    if task.list:
        print(listing())
        return []
    targets = select(task.targets) if task.targets or not task.report_only else []
    uri = (f"sqlite:///{(out_dir / 'mlflow.db').resolve()}" if task.fresh_store
           else resolve_uri(cfg.tracking.uri))
    opts = RunOptions(tracking_uri=uri,
                      out_dir=report_dir(task, out_dir),
                      work_dir=out_dir, cache_dir=cfg.cache_dir, n_jobs=task.n_jobs,
                      parallel_targets=parallel_targets(task), quick=task.quick,
                      rerun=cfg.rerun)
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    outcomes = {}
    to_run = [] if task.report_only else targets
    progress = Progress("reproduce targets", len(to_run), first_s=0, every_s=0)
    by_name = {t.name: t for t in to_run}
    for outcome in run_targets(to_run, opts):  # in the order they finish
        target = by_name[outcome.name]
        progress.step()
        outcomes[target.name] = outcome
        for result in collect([target], outcomes, opts.tracking_uri, opts.out_dir):
            record_target(result, opts.tracking_uri)  # as soon as it ran: wall time kept
        if outcome.ok:
            print(f"{target.name}: {outcome.seconds:.0f} s -> {outcome.output.csv}, "
                  f"{outcome.output.png}", flush=True)
        else:
            print(f"{target.name}: FAILED after {outcome.seconds:.0f} s: {outcome.error}",
                  flush=True)
    shown = targets if task.report_only and task.targets else TARGETS.values()
    results = collect(shown, outcomes, opts.tracking_uri, opts.out_dir)
    report = write_report(opts.out_dir / REPORT, results, command_line(task),
                          machine(opts.parallel_targets
                                  if sum(t.simulated for t in to_run) > 1 else 1))
    if not (task.out_dir or task.quick):  # results/: its index lists this study too
        write_results_index(opts.out_dir.parent)
    print(f"\n{report}")
    for result in results:
        for c in result.comparisons:
            verdict = ("not measured in this run" if not c.measured else
                       f"{'within' if c.within else 'OUTSIDE'} tolerance")
            print(f"  {result.target.name}: {c.published.label}: paper {c.published.value:g}, "
                  f"ours {c.ours:.4g} ({verdict})")
    outcomes = {t.name: outcomes[t.name] for t in to_run}  # in the order named
    failed = [o.name for o in outcomes.values() if not o.ok]
    if failed:
        raise SystemExit(f"powerbench reproduce: {len(failed)} of {len(outcomes)} target(s) "
                         f"failed: {failed} (logs under {out_dir})")
    return list(outcomes.values())
