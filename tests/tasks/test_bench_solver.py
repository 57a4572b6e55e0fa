"""`powerbench bench-solver`: the model x hardware x solver grid is a Hydra sweep whose
jobs the harness collects into one table."""

from __future__ import annotations

import pandas as pd
import pytest

from powerbench.measure.sweep_reports import job_reports, load_report, merge_reports

CELL = ["model=opt_13b", "hardware=pc_low"]
GRID = ["model=opt_13b", "hardware=pc_low,pc_high", "solver=greedy",
        "solver.communication=dense,expected"]


def _runs(store: str, experiment: str) -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(store)
    return mlflow.search_runs(experiment_names=[experiment])


def test_one_cell_without_multirun(run_cli, tmp_path):
    run_cli(["bench-solver", *CELL, "solver=greedy", f"hydra.run.dir={tmp_path / 'one'}"])
    row = pd.read_csv(tmp_path / "one" / "solver_scale.csv").iloc[0]
    assert row["model"] == "opt_13b" and row["hardware"] == "pc_low"
    assert row["solver"] == "greedy" and row["solve_time_s"] >= 0
    assert row["dense_gpu_share"] == 0.5  # the task yaml's solver setting reached the solver
    assert (tmp_path / "one" / "solver_scale.png").exists()


def test_one_cell_is_not_published_over_the_grid(run_cli, capsys):
    with pytest.raises(SystemExit):
        run_cli(["bench-solver", *CELL, "solver=greedy", "task.publish=true"])
    assert "powerbench -m bench-solver task.publish=true" in capsys.readouterr().err


def test_sweep_is_collected_into_one_table_and_rerun_skips(run_cli, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    argv = ["-m", "bench-solver", *GRID, f"hydra.sweep.dir={sweep}"]
    run_cli(argv)
    assert len(job_reports(sweep)["solver_scale"]) == 4  # one report per job
    table = pd.read_csv(sweep / "solver_scale.csv")
    assert sorted(zip(table.hardware, table.communication, strict=True)) == [
        ("pc_high", "dense"), ("pc_high", "expected"), ("pc_low", "dense"),
        ("pc_low", "expected")]
    assert (sweep / "solver_scale.png").exists()
    runs = _runs(run_cli.store, "bench_solver")
    collected = runs[runs["tags.sweep"] == "true"] if "tags.sweep" in runs else runs.iloc[:0]
    names = set(collected["tags.mlflow.runName"])
    assert "solver-solver_scale" in names
    one = collected[collected["tags.mlflow.runName"] == "solver-solver_scale"].iloc[0]
    assert one["metrics.opt_13b.pc_high.greedy.expected.solve_time_s"] >= 0
    assert "4 jobs of one sweep" in capsys.readouterr().out
    again = tmp_path / "again"
    run_cli([*argv[:-1], f"hydra.sweep.dir={again}"])  # every job finished before
    out = capsys.readouterr().out
    assert out.count("skipped: this job finished before") == 4
    assert len(pd.read_csv(again / "solver_scale.csv")) == 4  # still the whole grid


def test_merge_keeps_every_row_and_the_load_window(tmp_path):
    from powerbench.measure.harness import LoadWindow, Report

    def job(n: int, solver: str) -> Report:
        report = Report(study="solver", name="solver_scale", key=("solver",),
                        rows=[{"solver": solver, "solve_time_s": float(n)}],
                        load=LoadWindow(started=f"t{n}", ended=f"e{n}", load_before=n,
                                        load_after=n + 0.5, seconds=2.0))
        report.write(tmp_path / str(n))
        return load_report(tmp_path / str(n) / "solver_scale.json")

    merged = merge_reports([job(0, "greedy"), job(1, "ilp")])
    assert [r["solver"] for r in merged.rows] == ["greedy", "ilp"]
    assert merged.load.started == "t0" and merged.load.ended == "e1"
    assert merged.load.load_before == 0 and merged.load.load_after == 1.5
    assert merged.metric_dict() == {"greedy.solve_time_s": 0.0, "ilp.solve_time_s": 1.0}
