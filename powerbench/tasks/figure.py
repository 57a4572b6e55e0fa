"""`powerbench figure [NAME...]`: figures redrawn from MLflow runs (FIGURES and every
reproduction target, e.g. `powerbench figure fig10 fig12`), into the run directory's
figures/ (`task.out_dir` elsewhere; `task.publish=true` into results/, over the files the
docs cite)."""

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


def figures_dir(task: FigureTask, run_dir: Path) -> Path | None:
    """`task.out_dir`; else None with `publish` (each figure's results/ folder); else
    <run dir>/figures/."""
    if task.out_dir:
        return Path(task.out_dir)
    return None if task.publish else run_dir / "figures"


def figure(task: FigureTask, cfg: PowerbenchConfig, out_dir: Path) -> list:
    known = figures()
    unknown = sorted(set(task.figures) - set(known))
    if unknown:
        raise SystemExit(f"unknown figure(s) {unknown}; choose from {sorted(known)}")
    outputs = []
    target = figures_dir(task, out_dir)
    for name in task.figures or list(known):
        try:
            out = known[name](tracking_uri=resolve_uri(cfg.tracking.uri), out_dir=target)
        except LookupError as err:
            print(f"{name}: {err}")
            continue
        print(f"\n{name} -> {out.csv}, {out.png}")
        print(out.table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        outputs.append(out)
    return outputs
