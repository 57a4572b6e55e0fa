"""`powerbench figure`: where the redrawn figures go (never over results/ unless asked)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import powerbench.tasks.figure as task_module
from powerbench.config import load_config
from powerbench.figures.runs import FigureOutput
from powerbench.tasks.config import FigureTask


def _written(tmp_path: Path, monkeypatch, **task) -> Path | None:
    seen: list[Path | None] = []

    def fake(tracking_uri=None, out_dir=None):
        seen.append(out_dir)
        csv = Path(out_dir or tmp_path / "results") / "fake.csv"
        return FigureOutput("fake", csv, csv.with_suffix(".png"), pd.DataFrame({"x": [1]}))

    monkeypatch.setattr(task_module, "figures", lambda: {"fake": fake})
    cfg = load_config(["tracking=disabled", f"cache_dir={tmp_path / 'cache'}"])
    task_module.figure(FigureTask(figures=["fake"], **task), cfg, tmp_path / "run")
    return seen[0]


def test_figures_go_to_the_run_directory_by_default(tmp_path, monkeypatch):
    assert _written(tmp_path, monkeypatch) == tmp_path / "run" / "figures"


def test_publish_writes_where_the_docs_cite_and_out_dir_wins(tmp_path, monkeypatch):
    assert _written(tmp_path, monkeypatch, publish=True) is None  # each figure's results/
    assert _written(tmp_path, monkeypatch, out_dir=str(tmp_path / "x"),
                    publish=True) == tmp_path / "x"
