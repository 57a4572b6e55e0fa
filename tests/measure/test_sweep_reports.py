"""A sweep's harness reports collected into one table (powerbench.measure.sweep_reports)."""

from __future__ import annotations

import json

import pandas as pd

from powerbench.measure.harness import LoadWindow, Report, finish
from powerbench.measure.sweep_reports import collect, job_reports


def _job(sweep, n: int, name: str, value: float) -> None:
    report = Report(study="probe", name=name, key=("variant",), window_columns=True,
                    rows=[{"variant": f"v{n}", "tok_s": value}],
                    load=LoadWindow(started=f"2026-01-01 00:0{n}:00 UTC", ended="x",
                                    load_before=float(n), load_after=float(n)))
    finish(report, sweep / str(n))


def test_names_written_by_several_jobs_are_merged(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for n in range(3):
        _job(sweep, n, "speed", 10.0 * (n + 1))
    _job(sweep, 3, "single", 1.0)  # one job only: nothing to merge
    (sweep / "4").mkdir()
    (sweep / "4" / "metrics.json").write_text(json.dumps({"x": 1}))  # not a harness report
    assert sorted(job_reports(sweep)) == ["single", "speed"]
    (report,) = collect(sweep)
    table = pd.read_csv(sweep / "speed.csv")
    assert list(table.variant) == ["v0", "v1", "v2"] and list(table.tok_s) == [10, 20, 30]
    assert list(table.load_avg_1m_before) == [0, 1, 2]  # each job's own window, per row
    assert report.load.started.endswith("00:00:00 UTC") and report.load.load_after == 2.0
    assert "3 jobs of one sweep" in capsys.readouterr().out
    assert not (sweep / "single.csv").exists()


def test_report_figure_is_drawn_beside_the_csv(tmp_path):
    report = Report(study="probe", name="fig", key=("x",), rows=[{"x": "a", "y": 1.0}],
                    figure="powerbench.tasks.bench_solver.plot")
    finish(report, tmp_path)
    assert (tmp_path / "fig.png").exists() and report.extra_files == [tmp_path / "fig.png"]
    assert json.loads((tmp_path / "fig.json").read_text())["figure"] == report.figure
