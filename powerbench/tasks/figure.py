"""`powerbench figure [NAME...]`: figures redrawn from MLflow runs (FIGURES and every
reproduction target, e.g. `powerbench figure fig10 fig12`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.figures import FIGURES
from powerbench.reproduce import TARGETS
from powerbench.tasks.config import FigureTask
from powerbench.tracking import resolve_uri


def figures() -> dict[str, Callable]:
    """Every figure function by name: the reproduction targets' and the others."""
    return {**{t.name: t.figure for t in TARGETS.values()}, **FIGURES}


def figure(task: FigureTask, cfg: PowerbenchConfig, out_dir: Path) -> list:
    known = figures()
    unknown = sorted(set(task.figures) - set(known))
    if unknown:
        raise SystemExit(f"unknown figure(s) {unknown}; choose from {sorted(known)}")
    outputs = []
    for name in task.figures or list(known):
        try:
            out = known[name](tracking_uri=resolve_uri(cfg.tracking.uri), out_dir=task.out_dir)
        except LookupError as err:
            print(f"{name}: {err}")
            continue
        print(f"\n{name} -> {out.csv}, {out.png}")
        print(out.table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        outputs.append(out)
    return outputs
