"""`powerbench` (task=run): the experiment pipeline, then its results table."""

from __future__ import annotations

from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.pipeline import RunContext, run_experiment
from powerbench.tasks.config import RunTask
from powerbench.tracking import ui_command


def results_table(metrics: dict[str, float], notes: list[str]) -> str:
    width = max((len(k) for k in metrics), default=10)
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 14}"]
    for key in sorted(metrics):
        value = metrics[key]
        shown = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.4e}"
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(notes + [""] + lines)


def run(task: RunTask, cfg: PowerbenchConfig, out_dir: Path) -> RunContext:
    ctx = run_experiment(cfg, out_dir)
    print("\n" + results_table(ctx.metrics, ctx.notes))
    print(f"\nresults: {out_dir}/metrics.json")
    if ctx.tracker.enabled:
        print(f"MLflow run {ctx.tracker.run_id} in experiment '{ctx.tracker.experiment}'.")
        print(f"Open the dashboard with:\n  {ui_command(ctx.tracker.uri)}")
    return ctx
