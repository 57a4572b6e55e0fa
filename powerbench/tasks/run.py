"""`powerbench` (task=run): the experiment pipeline, then its results table."""

from __future__ import annotations

from pathlib import Path

from powerbench.build import build
from powerbench.config import PowerbenchConfig
from powerbench.pipeline import RunContext, run_experiment
from powerbench.tasks.config import RunTask
from powerbench.tracking import ui_command
from powerbench.tracking.jobs import JOB_TAG, JobLedger, sweep_marker


def results_table(metrics: dict[str, float], notes: list[str]) -> str:
    width = max((len(k) for k in metrics), default=10)
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 14}"]
    for key in sorted(metrics):
        value = metrics[key]
        shown = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.4e}"
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(notes + [""] + lines)


def run(task: RunTask, cfg: PowerbenchConfig, out_dir: Path) -> RunContext | None:
    """The pipeline, unless this exact config finished before (`rerun=true` forces it)."""
    ledger = JobLedger(cfg)
    tracker = build(cfg.tracking)
    if not cfg.rerun:
        done = ledger.finished_locally()
        run_id = None if done else ledger.finished_in_mlflow(tracker)
        if done or run_id:
            where = done["metrics"] if done else f"MLflow run {run_id}"
            print(f"skipped: job {ledger.job_id} finished before ({where}); "
                  "rerun=true (or --force) runs it again")
            sweep_marker("skipped")
            return None
    try:
        ctx = run_experiment(cfg, out_dir, tags={JOB_TAG: ledger.job_id}, tracker=tracker)
    except BaseException:
        sweep_marker("failed")
        raise
    ledger.mark_finished(out_dir, ctx.tracker.run_id)
    sweep_marker("finished")
    print("\n" + results_table(ctx.metrics, ctx.notes))
    print(f"\nresults: {out_dir}/metrics.json")
    if ctx.tracker.enabled and ctx.tracker.offline:
        print(f"tracking server {ctx.tracker.uri} unreachable: the MLflow run is queued in "
              f"{ctx.tracker.record.path}; `powerbench sync` uploads it")
    elif ctx.tracker.enabled:
        print(f"MLflow run {ctx.tracker.run_id} in experiment '{ctx.tracker.experiment}'.")
        print(f"Open the dashboard with:\n  {ui_command(ctx.tracker.uri)}\nthen its runs: "
              f"{ctx.tracker.runs_link()}")
    return ctx
