"""Resumable sweeps: a job's stable identity, and whether it finished before.

A job is identified by the hash of its resolved config (`rerun` left out); the code
version is recorded beside it, not in it (a measured benchmark also records the package's
sources fingerprint, and runs again when they changed: powerbench.measure.harness). A
finished job leaves a ledger entry `<cache>/jobs/<job_id>.json` pointing at its
`metrics.json`, and its MLflow run carries the tag `powerbench.job_id`. A re-run of the
same sweep skips a job whose entry and metrics file are complete, or whose MLflow run is
FINISHED; failed and killed jobs run again; `rerun=true` (`powerbench --force ...`) runs
everything. In a multirun each job also drops a marker in `<sweep dir>/.jobs/` so the
sweep callback can say how many were skipped.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from powerbench.cache import stable_hash
from powerbench.paths import cache_dir
from powerbench.tracking.provenance import git_sha

JOB_TAG = "powerbench.job_id"
MARKERS = ".jobs"


def job_identity(cfg: Any) -> str:
    """Hash of the resolved config, whatever `rerun` says."""
    from powerbench.config import as_container

    return stable_hash(as_container(dataclasses.replace(cfg, rerun=False)))


class JobLedger:
    def __init__(self, cfg: Any) -> None:
        self.job_id = job_identity(cfg)
        self.path = cache_dir(cfg.cache_dir) / "jobs" / f"{self.job_id}.json"

    def finished_locally(self) -> dict | None:
        """The ledger entry when it says FINISHED and its metrics.json is complete."""
        try:
            entry = json.loads(self.path.read_text())
            metrics = json.loads(Path(entry["metrics"]).read_text())
        except (OSError, ValueError, KeyError):
            return None
        return entry if entry.get("status") == "FINISHED" and metrics else None

    def finished_in_mlflow(self, tracker: Any) -> str | None:
        """The id of a FINISHED MLflow run of this job (None offline or when there is none)."""
        if not tracker.enabled:
            return None
        try:
            if not tracker.reachable():
                return None
            runs = tracker.client.search_runs(
                [tracker.experiment_id()],
                f"tags.`{JOB_TAG}` = '{self.job_id}' and attributes.status = 'FINISHED'",
                max_results=1)
        except Exception:  # noqa: BLE001 - an unreadable store: run the job again
            return None
        return runs[0].info.run_id if runs else None

    def mark_finished(self, out_dir: Path, run_id: str | None,
                      metrics_file: str = "metrics.json", **extra: str) -> None:
        """Write the FINISHED entry; `extra`: more fields its reader compares (the
        measurement harness: `sources`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"status": "FINISHED", "job_id": self.job_id, "run_id": run_id,
                 "metrics": str(out_dir / metrics_file), "code_version": git_sha(),
                 **extra, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry, indent=1))
        tmp.replace(self.path)


def sweep_marker(state: str) -> None:
    """In a multirun: `<sweep dir>/.jobs/<job num>.<state>` (finished, skipped, failed)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        hydra = HydraConfig.get()
    except ValueError:
        return
    if hydra.mode != RunMode.MULTIRUN:
        return
    folder = Path(hydra.sweep.dir) / MARKERS
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{hydra.job.num}.*"):
        old.unlink()
    (folder / f"{hydra.job.num}.{state}").write_text(state)


def sweep_counts(sweep_dir: str | Path) -> dict[str, int]:
    """Jobs of a multirun by final state, from their markers."""
    counts = {"finished": 0, "skipped": 0, "failed": 0}
    for marker in (Path(sweep_dir) / MARKERS).glob("*.*"):
        state = marker.suffix.lstrip(".")
        counts[state] = counts.get(state, 0) + 1
    counts["total"] = sum(counts.values())
    return counts
