"""`powerbench reproduce`: where its figures, CSVs and report go."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import powerbench.tasks.reproduce as task_module
from powerbench.config import load_config
from powerbench.figures.runs import FigureOutput
from powerbench.reproduce.target_runner import Outcome
from powerbench.tasks.config import ReproduceTask


@pytest.fixture
def written(tmp_path, monkeypatch):
    """Runs nothing; records the report's path and whether results/README.md was indexed.
    The published report lives in `tmp_path/results/reproduction`."""
    paper = tmp_path / "results" / "reproduction"
    paper.mkdir(parents=True)
    out: dict[str, list[Path]] = {"report": [], "index": [], "figures": []}

    def run_targets(targets, opts):
        out["figures"].append(opts.out_dir)  # where each target's CSV and PNG go
        for t in targets:
            csv = opts.out_dir / f"{t.name}.csv"
            yield Outcome(t.name, 0.0, FigureOutput(t.name, csv, csv.with_suffix(".png"),
                                                    pd.DataFrame()))

    monkeypatch.setattr(task_module, "paper_results_dir", lambda: paper)
    monkeypatch.setattr(task_module, "run_targets", run_targets)
    monkeypatch.setattr(task_module, "collect", lambda *args: [])
    monkeypatch.setattr(task_module, "write_report",
                        lambda path, *args: out["report"].append(path) or "report")
    monkeypatch.setattr(task_module, "write_results_index",
                        lambda root: out["index"].append(root))
    out["paper"] = [paper]
    return out


def _reproduce(tmp_path: Path, **task) -> None:
    cfg = load_config(["tracking=disabled", f"cache_dir={tmp_path / 'cache'}"])
    task_module.reproduce(ReproduceTask(targets=["fig12"], **task), cfg, tmp_path / "run")


def test_quick_run_never_replaces_the_published_report(tmp_path, written):
    _reproduce(tmp_path, quick=True)
    assert written["figures"] == [tmp_path / "run" / "reproduction"]
    assert written["report"] == [tmp_path / "run" / "reproduction" / "README.md"]
    assert written["index"] == []  # results/README.md untouched too
    assert not any(written["paper"][0].iterdir())


def test_full_run_writes_the_published_report(tmp_path, written):
    _reproduce(tmp_path)
    assert written["figures"] == written["paper"]
    assert written["report"] == [written["paper"][0] / "README.md"]
    assert written["index"] == [written["paper"][0].parent]


def test_out_dir_wins_for_a_quick_run(tmp_path, written):
    _reproduce(tmp_path, quick=True, out_dir=str(tmp_path / "mine"))
    assert written["report"] == [tmp_path / "mine" / "README.md"]
