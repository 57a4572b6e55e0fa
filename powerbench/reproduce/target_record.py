"""Each reproduced target as one MLflow run (`reproduce:<name>`, in the target's own
experiment): its figure, CSV and published-vs-ours table as artifacts, the signed error
of every published row (`error/<row>`), how many are within tolerance and the wall time
as metrics, tagged `reproduce_target=<name>`."""

from __future__ import annotations

import math
import re

from powerbench.reproduce.report import Comparison, TargetResult, comparison_table
from powerbench.tracking.config import TrackingConfig
from powerbench.tracking.tracker import Tracker

TAG = "reproduce_target"


def metric_name(label: str) -> str:
    """A published row's label as an MLflow metric key."""
    return "error/" + re.sub(r"[^0-9A-Za-z_.\-/ ]+", "", label).strip().replace(" ", "_")[:200]


def target_metrics(result: TargetResult) -> dict[str, float]:
    comparisons: list[Comparison] = result.comparisons
    metrics = {metric_name(c.published.label): c.error for c in comparisons
               if math.isfinite(c.error)}
    metrics["published_rows"] = float(len(comparisons))
    metrics["published_within"] = float(sum(c.within for c in comparisons))
    if result.ran is not None:
        metrics["wall_seconds"] = result.ran.seconds
    return metrics


def record_target(result: TargetResult, tracking_uri: str) -> str | None:
    """The target's MLflow run; its run id (None when tracking is off or offline)."""
    target = result.target
    tracker = Tracker(TrackingConfig(uri=tracking_uri,
                                     experiment=target.experiment or target.name))
    with tracker.run(f"reproduce:{target.name}", tags={TAG: target.name}) as run:
        run.log_metrics(target_metrics(result))
        for path in (result.csv, result.png):
            if path is not None and path.exists():
                run.log_artifact(path, "reproduce")
        if result.comparisons:
            run.log_text(comparison_table(result.comparisons), "reproduce/published_vs_ours.md")
        if result.error:
            run.set_tags({"reproduce_error": result.error[:5000]})
    return tracker.run_id if tracker.enabled and not tracker.offline else None
