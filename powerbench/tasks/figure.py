"""`powerbench figure task.figures=[pc_high_e2e]`: figures redrawn from MLflow runs."""

from __future__ import annotations

from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.figures import FIGURES
from powerbench.tasks.config import FigureTask
from powerbench.tracking import resolve_uri


def figure(task: FigureTask, cfg: PowerbenchConfig, out_dir: Path) -> list:
    unknown = sorted(set(task.figures) - set(FIGURES))
    if unknown:
        raise SystemExit(f"unknown figure(s) {unknown}; choose from {sorted(FIGURES)}")
    outputs = []
    for name in task.figures or list(FIGURES):
        try:
            out = FIGURES[name](tracking_uri=resolve_uri(cfg.tracking.uri),
                                out_dir=task.out_dir)
        except LookupError as err:
            print(f"{name}: {err}")
            continue
        print(f"\n{name} -> {out.csv}, {out.png}")
        print(out.table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        outputs.append(out)
    return outputs
