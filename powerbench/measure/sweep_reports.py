"""A Hydra multirun's reports collected into one table: the harness across a sweep.

Each job of `powerbench -m <benchmark task> model=a,b solver=x,y ...` measures its cell
and reports it through the harness in its own directory (`<sweep dir>/<job>/<name>.csv`
and `.json`). `CollectReports`, a Hydra callback (conf/config.yaml), reads them when the
sweep ends and finishes ONE report per report name that several jobs wrote, with every
job's rows, in the sweep directory: one printed table, one CSV/JSON/txt (and the report's
figure), one MLflow run (tagged `sweep`), and results/<study>/ when the sweep ran with
`task.publish=true`. A job skipped because it finished before leaves the earlier run's
files in its directory (`harness.copy_reports`), so a re-run sweep still collects the
whole grid. Sweeps of other tasks (no harness reports) are left alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from powerbench.measure.harness import LoadWindow, MachineFacts, Report, finish


def load_report(meta_path: Path) -> Report:
    """A report written by `Report.write` (<name>.json and the <name>.csv beside it)."""
    import pandas as pd

    meta = json.loads(Path(meta_path).read_text())
    frame = pd.read_csv(Path(meta_path).with_suffix(".csv"))
    rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]
    load = meta.get("load")
    return Report(study=meta["study"], name=meta["name"], rows=rows, key=meta.get("key", []),
                  title=meta.get("title", ""), metrics=meta.get("metrics", []),
                  columns=meta.get("columns", []), notes=meta.get("notes", []),
                  params=meta.get("params", {}), measured=meta.get("measured", True),
                  machine=MachineFacts(**meta["machine"]) if meta.get("machine") else None,
                  load=LoadWindow(**load) if load else None, figure=meta.get("figure", ""),
                  window_columns=False)


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report of every row of `reports` (the same study and name, one per job): the
    first job's machine, a load window from the first start to the last end, the notes
    of all (once each)."""
    if not reports:
        raise ValueError("no reports to merge")
    first = reports[0]
    loads = [r.load for r in reports if r.load is not None]
    load = None
    if loads:
        load = LoadWindow(started=loads[0].started, ended=loads[-1].ended,
                          load_before=loads[0].load_before, load_after=loads[-1].load_after,
                          seconds=round(sum(w.seconds for w in loads), 1))
    columns = list(dict.fromkeys(c for r in reports for c in r.columns))
    present = {c for r in reports for row in r.rows for c in row}
    return Report(study=first.study, name=first.name,
                  rows=[row for r in reports for row in r.rows], key=first.key,
                  title=first.title, metrics=first.metrics,
                  columns=[c for c in columns if c in present],
                  notes=list(dict.fromkeys(n for r in reports for n in r.notes)),
                  params={"jobs": [r.params for r in reports]}, machine=first.machine,
                  load=load, measured=first.measured, figure=first.figure)


def job_reports(sweep_dir: Path) -> dict[str, list[Path]]:
    """Every job's harness report (`<job>/<name>.json` with a study) in a sweep
    directory, by report name, in job order."""
    found: dict[str, list[Path]] = {}
    jobs = sorted((p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()),
                  key=lambda p: int(p.name)) if Path(sweep_dir).is_dir() else []
    for job in jobs:
        for meta in sorted(job.glob("*.json")):
            try:
                content = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(content, dict) and {"study", "name", "key"} <= content.keys() \
                    and meta.with_suffix(".csv").is_file():
                found.setdefault(meta.stem, []).append(meta)
    return found


def collect(sweep_dir: Path, tracking: Any = None, publish_to: Path | None = None
            ) -> list[Report]:
    """Each report name that two or more jobs of the sweep wrote, merged and finished in
    `sweep_dir` (MLflow through `tracking`, results/ under `publish_to` when given)."""
    collected = []
    for paths in job_reports(sweep_dir).values():
        if len(paths) < 2:
            continue
        report = merge_reports([load_report(p) for p in paths])
        report.title = f"{report.title} ({len(paths)} jobs of one sweep)"
        finish(report, Path(sweep_dir), tracking, publish_to, tags={"sweep": "true"})
        collected.append(report)
    return collected


class CollectReports(Callback):
    """On a multirun's end: `collect` the jobs' harness reports (see the module doc)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from powerbench.config import typed
        from powerbench.paths import results_dir

        sweep_dir = Path(config.hydra.sweep.dir)
        if not job_reports(sweep_dir):
            return
        publish = bool(OmegaConf.select(config, "task.publish", default=False))
        collect(sweep_dir, typed(config.tracking), results_dir() if publish else None)
