"""`powerbench reproduce`: listing, name checks, a quick target end to end, the report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose

from powerbench.config import CONF_DIR, hydra_context, typed
from powerbench.figures.runs import FigureOutput
from powerbench.figures.stamp import (
    HandEditedError,
    check_stamped_text,
    read_stamped_csv,
    write_stamped_csv,
)
from powerbench.reproduce import TARGETS, Published, Target
from powerbench.reproduce.report import TargetResult, collect, compare, render, write_report
from powerbench.reproduce.target_record import record_target
from powerbench.reproduce.target_runner import Outcome, RunOptions, commands, run_targets
from powerbench.tasks.config import ReproduceTask
from powerbench.tasks.reproduce import parallel_targets


def test_list_names_every_target(run_cli, capsys):
    run_cli(["reproduce", "--list"])
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["name", "kind", "runs", "published"]
    for target in TARGETS.values():
        line = next(ln for ln in out.splitlines() if ln.startswith(f"{target.name} "))
        assert ("simulated" if target.simulated else "measured") in line
        assert f"  {len(target.published)}  " in line
    assert "experiment=fig12 (4 sweeps)" in out


def test_unknown_target_lists_the_valid_ones(run_cli):
    with pytest.raises(SystemExit, match=r"unknown target\(s\) \['fig99'\].*'fig10'.*'all'"):
        run_cli(["reproduce", "fig99"])


def test_quick_runs_only_the_first_sweep_reduced(tmp_path):
    opts = RunOptions(tracking_uri="sqlite:///x.db", out_dir=tmp_path, work_dir=tmp_path,
                      quick=True, rerun=True, n_jobs=3)
    (args,) = commands(TARGETS["fig13"], opts)
    assert args[:3] == ["--multirun", "experiment=fig13", "hydra/launcher=parallel"]
    assert "hydra.launcher.n_jobs=3" in args and "rerun=true" in args
    assert args[-2:] == ["model=opt_66b", "bench.new_tokens=128"]
    full = commands(TARGETS["fig13"], RunOptions("sqlite:///x.db", tmp_path, tmp_path))
    assert len(full) == 2 and "hardware=pc_low" in full[1]
    (single,) = commands(TARGETS["fig13"], replace(opts, n_jobs=1))
    assert single[:3] == ["--multirun", "experiment=fig13", "hydra/launcher=basic"]
    assert not any(a.startswith("hydra.launcher.") for a in single)


def test_simulated_targets_run_together_and_measured_ones_alone(tmp_path, monkeypatch):
    """run_targets: at most parallel_targets simulated targets' children at once, each
    measured target with nothing beside it, every figure drawn in the calling thread, and
    each target's seconds its own children's time plus its figure's."""
    import threading

    import powerbench.reproduce.target_runner as runner

    lock, running, seen = threading.Lock(), set(), []

    def children(target, opts, log, _children):
        with lock:
            running.add(target.name)
            seen.append(frozenset(running))
        threading.Event().wait(0.1)
        with lock:
            running.discard(target.name)
        return 0.1, None if target.name != "s2" else "`powerbench x` exited with 1"

    def figure(tracking_uri, out_dir):
        assert threading.current_thread() is threading.main_thread()
        return FigureOutput("f", Path("f.csv"), Path("f.png"), pd.DataFrame())

    monkeypatch.setattr(runner, "_run_children", children)
    monkeypatch.setattr(runner, "_tail", lambda log: "")
    targets = [Target(name, figure, command=("ui",), command_title="t", simulated=sim)
               for name, sim in [("s1", True), ("m1", False), ("s2", True), ("s3", True),
                                 ("m2", False)]]
    opts = RunOptions("sqlite:///x.db", tmp_path, tmp_path, parallel_targets=2)
    outcomes = list(run_targets(targets, opts))
    assert [o.name for o in outcomes][-2:] == ["m1", "m2"]  # alone, after, in order
    assert {o.name for o in outcomes[:3]} == {"s1", "s2", "s3"}
    assert max(len(r) for r in seen) == 2
    assert all(len(r) == 1 for r in seen if {"m1", "m2"} & r)
    assert not next(o for o in outcomes if o.name == "s2").ok
    assert all(0.1 <= o.seconds < 1 for o in outcomes)
    seen.clear()
    assert [o.name for o in run_targets(targets, replace(opts, parallel_targets=1))] == [
        "s1", "m1", "s2", "s3", "m2"]
    assert max(len(r) for r in seen) == 1


def test_an_interrupt_ends_the_running_children_and_starts_no_other(tmp_path):
    import sys
    import threading
    import time

    from powerbench.reproduce.target_runner import _Children

    children, codes = _Children(), []
    with open(tmp_path / "log", "w") as out:
        waiting = threading.Thread(target=lambda: codes.append(children.run(
            [sys.executable, "-c", "import time; time.sleep(60)"], out)))
        waiting.start()
        while not children._running:
            time.sleep(0.01)
        start = time.perf_counter()
        children.stop()
        waiting.join()
        assert codes == [-15] and time.perf_counter() - start < 10
        assert children.run([sys.executable, "-c", "pass"], out) == -15  # never started


def test_parallel_targets_default_fills_the_cores():
    assert parallel_targets(ReproduceTask(n_jobs=2), cores=2) == 1
    assert parallel_targets(ReproduceTask(n_jobs=1), cores=2) == 2
    assert parallel_targets(ReproduceTask(n_jobs=4), cores=16) == 4
    assert parallel_targets(ReproduceTask(n_jobs=4, parallel_targets=3), cores=16) == 3
    with pytest.raises(ValueError, match=r"task.parallel_targets=-1 is out of range; valid: "
                                         r"0 <= task.parallel_targets"):
        ReproduceTask(parallel_targets=-1)


@pytest.mark.parametrize("name", [n for n, t in TARGETS.items() if t.experiment])
def test_every_target_experiment_composes_with_its_sweeps(name):
    """The experiment is a conf/experiment file (so the glob test in tests/config covers it)
    and each sweep's and the quick sweep's overrides compose, one value at a time."""
    target = TARGETS[name]
    assert (Path(CONF_DIR) / "experiment" / f"{target.experiment}.yaml").exists()
    with hydra_context():  # not module-wide: the CLI tests here start their own Hydra
        for overrides in [*target.sweeps, (*target.sweeps[0], *target.quick)]:
            values = [o.split("=", 1) for o in overrides]
            for pick in range(max([len(v.split(",")) for _, v in values] or [1])):
                point = [f"{k}={v.split(',')[min(pick, len(v.split(',')) - 1)]}"
                         for k, v in values]
                cfg = typed(compose("config", overrides=[f"experiment={target.experiment}",
                                                         *point]))
                # simulated targets simulate; measured ones (table7) run an engine
                assert (cfg.simulator if target.simulated else cfg.engine) is not None
                assert cfg.tracking.experiment == target.experiment


def _target(published: tuple[Published, ...]) -> Target:
    def figure(**_: object) -> FigureOutput:
        raise LookupError("no runs")

    return Target("figX", figure, command=("ui",), command_title="a hand-made target",
                  published=published)


def test_report_marks_within_and_outside_tolerance():
    table = pd.DataFrame({"tps": [8.0, 12.0], "share": [0.55, 0.65],
                          "hardware": ["pc_high", "pc_high"]})
    mean = lambda col: lambda t: float(t[col].mean())  # noqa: E731
    target = _target((
        Published("speed in", 9.0, mean("tps"), "test"),  # +11%: within 20%
        Published("speed out", 7.0, mean("tps"), "test", calibration=True),  # +43%
        Published("share in", 0.7, mean("share"), "test", tolerance=0.1, absolute=True),
        Published("share out", 0.2, mean("share"), "test", tolerance=0.1, absolute=True),
        Published("missing", 1.0, lambda t: float(t["nope"].mean()), "test"),
    ))
    rows = compare(target, table)
    assert [c.within for c in rows] == [True, False, True, False, False]
    assert rows[0].error == pytest.approx(1 / 9) and rows[2].error == pytest.approx(-0.1)
    text = render([TargetResult(target, table=table, csv=Path("figX.csv"),
                                png=Path("figX.png"), comparisons=rows)],
                  "powerbench reproduce figX")
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in text.splitlines() if ln.startswith("| ")}
    assert "| +11.1% | ±20% | yes | validation |" in lines["speed in"]
    assert "| +42.9% | ±20% | no | calibration |" in lines["speed out"]
    assert "| -0.1 | ±0.1 | yes |" in lines["share in"]
    assert "| +0.4 | ±0.1 | no |" in lines["share out"]
    assert "| n/a | n/a | ±20% | n/a |" in lines["missing"]  # counted as not within
    assert "2 of 5 published numbers within tolerance" in text
    assert "Generated by `powerbench reproduce figX`" in text and "cost model" in text
    assert "SIMULATED by the cost model on pc_high" in text
    described = render([TargetResult(target, table=table, csv=Path("figX.csv"),
                                     png=Path("figX.png"), hardware={"pc_high": "a desk PC"})],
                       "powerbench reproduce figX")
    assert "SIMULATED by the cost model on pc_high (a desk PC)" in described


def test_rows_read_under_another_counting_are_shown_but_not_counted():
    table = pd.DataFrame({"tps": [8.0, 12.0]})
    mean = lambda t: float(t["tps"].mean())  # noqa: E731
    target = _target((
        Published("speed", 7.0, mean, "test", calibration=True),  # +43%: out
        Published("speed, other counting", 10.0, mean, "test", scored=False),  # within
    ))
    rows = compare(target, table)
    text = render([TargetResult(target, table=table, csv=Path("figX.csv"),
                                png=Path("figX.png"), comparisons=rows)],
                  "powerbench reproduce figX")
    assert "0 of 1 published numbers within tolerance (0 of 1 calibration rows)" in text
    assert "| figX | " in text and "| 0 of 1 |" in text
    assert "| yes | not scored (another counting) |" in text


def _stamped_figure(name: str, value: float = 2.0):
    def figure(tracking_uri: str, out_dir: Path) -> FigureOutput:
        table = pd.DataFrame({"x": [value]})
        csv = write_stamped_csv(table, Path(out_dir) / f"{name}.csv")
        return FigureOutput(name, csv, csv, table)

    return figure


def test_report_refuses_a_hand_edited_csv(tmp_path):
    """The report reads every figure table back from its CSV and checks the content hash
    written with it: an edited number stops the report, naming the file."""
    target = Target("good", _stamped_figure("good"), command=("ui",), command_title="t",
                    published=(Published("x", 2.0, lambda t: float(t.x.iloc[0]), "test"),))
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    (result,) = collect([target], {}, uri, tmp_path)
    assert result.comparisons[0].within and result.table.x.iloc[0] == 2.0
    csv = tmp_path / "good.csv"

    def edited(tracking_uri: str, out_dir: Path) -> FigureOutput:
        lines = csv.read_text().splitlines()
        csv.write_text("\n".join([*lines[:-1], "2.5", ""]))  # a hand edit after writing
        return FigureOutput("good", csv, csv, pd.DataFrame({"x": [2.0]}))

    _stamped_figure("good")(tracking_uri="", out_dir=tmp_path)
    with pytest.raises(HandEditedError, match="good.csv was edited"):
        collect([replace(target, figure=edited)], {}, uri, tmp_path)
    csv.write_text("x\n2.0\n")  # no stamp at all: not written by powerbench
    with pytest.raises(HandEditedError, match="no content hash"):
        read_stamped_csv(csv)


def test_report_is_stamped_and_has_no_paths(tmp_path):
    target = Target("good", _stamped_figure("good"), command=("ui",), command_title="t",
                    published=(Published("x", 2.0, lambda t: float(t.x.iloc[0]), "test"),))
    results = collect([target], {}, f"sqlite:///{tmp_path / 'store.db'}", tmp_path)
    path = write_report(tmp_path / "README.md", results, "powerbench reproduce good", "run on X")
    body = check_stamped_text(path)
    assert str(tmp_path) not in body and "sqlite" not in body
    assert "not run by this command" in body and "| good | earlier runs | - | 1 |" in body
    path.write_text(path.read_text().replace("1 of 1", "0 of 1"))
    with pytest.raises(HandEditedError):
        check_stamped_text(path)


def test_target_record_logs_errors_artifacts_and_wall_time(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    target = Target("good", _stamped_figure("good", 2.5), command=("ui",), command_title="t",
                    published=(Published("x in range", 2.0, lambda t: float(t.x.iloc[0]),
                                         "test"),))
    (result,) = collect([target], {}, uri, tmp_path)
    result.ran = Outcome("good", 12.0, output=None)
    run_id = record_target(result, uri)
    run = mlflow.tracking.MlflowClient(uri).get_run(run_id)
    assert run.data.metrics["error/x_in_range"] == pytest.approx(0.25)
    assert run.data.metrics["published_within"] == 0.0
    assert run.data.metrics["wall_seconds"] == 12.0
    assert run.data.tags["reproduce_target"] == "good" and run.info.run_name == "reproduce:good"
    files = {f.path for f in mlflow.tracking.MlflowClient(uri).list_artifacts(run_id,
                                                                              "reproduce")}
    assert {"reproduce/good.csv", "reproduce/published_vs_ours.md"} <= files
    # a later report that does not run the target shows the recorded wall time
    (later,) = collect([target], {}, uri, tmp_path)
    assert later.recorded_seconds == 12.0
    assert "| good | earlier runs | 12 (recorded) |" in render([later], "powerbench reproduce")


@pytest.mark.slow
def test_a_failing_target_keeps_the_others_and_exits_non_zero(run_cli, tmp_path, monkeypatch):
    import powerbench.tasks.reproduce as task

    out = tmp_path / "results"
    targets = {
        "bad": Target("bad", _stamped_figure("bad"), command=("figure", "no_such_figure"),
                      command_title="fails", simulated=False),
        "good": Target("good", _stamped_figure("good"), command=("ui",), command_title="works",
                       simulated=False,
                       published=(Published("x", 2.0, lambda t: float(t.x.iloc[0]), "test"),)),
    }
    monkeypatch.setattr(task, "TARGETS", targets)
    with pytest.raises(SystemExit, match=r"1 of 2 target\(s\) failed: \['bad'\]"):
        run_cli(["reproduce", "bad", "good", f"task.out_dir={out}"])
    assert (out / "good.csv").exists()
    report = check_stamped_text(out / "README.md")
    assert "## bad" in report and "**FAILED**" in report and "exited with" in report
    assert "| x | 2 | 2 | +0.0% | ±20% | yes |" in report and "MEASURED on this machine" in report
    assert str(tmp_path) not in report


# every target's reduced sweep end to end, as `powerbench reproduce --quick all` runs them:
# one child sweep per target, two simulated targets at a time (the measured ones alone),
# into one fresh store and one cache, each
# target's figure, its MLflow record and the one report; what each quick table must hold
QUICK = {
    "fig10": {"model": ["opt_30b"]}, "fig11": {"model": ["opt_13b"]},
    "fig12": {"model": ["opt_30b"], "hardware": ["pc_high"]},
    "fig13": {"model": ["opt_66b"]}, "fig14": {"batch_size": [1, 8]},
    "fig15": {"model": ["bamboo_7b"]}, "fig16": {}, "fig17": {"model": ["opt_13b"]},
    "fig18": {"model": ["opt_30b"], "prompt_tokens": [1]},
    "table6": {}, "table7": {"model": ["tiny_relu_quick"] * 2},
    "pi2_decode": {"model": ["bamboo_7b"] * 2}, "pi2_budget": {"dram_budget_gb": [12.0]},
    "pi2_prefill": {"model": ["bamboo_7b"]}, "pi2_memory": {"model": ["bamboo_7b"]},
    "pi2_ablation": {"step": ["Baseline", "+XPU"]},
}


def test_every_target_has_a_quick_check():
    assert set(QUICK) == set(TARGETS)


@pytest.fixture(scope="module")
def quick_run(request, tmp_path_factory):
    """`powerbench reproduce --quick all task.fresh_store=true` (only the targets whose
    test below is selected, when not all are), run once for the module's per-target
    checks: (command, output folder, root folder, the task's exit message or None). A
    failing target does not stop the others (the task exits non-zero at the end, naming
    it): each target's test fails on its own."""
    from powerbench.cli import main

    selected = sorted({item.callspec.params["name"] for item in request.session.items
                       if item.originalname == "test_quick_target_end_to_end"})
    names = ["all"] if selected == sorted(TARGETS) else selected
    root = tmp_path_factory.mktemp("quick")
    out = root / "results"
    try:
        main(["reproduce", "--quick", *names, f"task.out_dir={out}", "task.fresh_store=true",
              "task.n_jobs=1", "task.parallel_targets=2",
              f"cache_dir={root / 'cache'}", f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
              f"hydra.run.dir={root / 'run'}", f"hydra.sweep.dir={root / 'sweep'}"])
        failed = None
    except SystemExit as exit_:
        failed = str(exit_)
    command = " ".join(["powerbench reproduce --quick", *names, "task.fresh_store=true",
                        "task.n_jobs=1", "task.parallel_targets=2"])
    return command, out, root, failed


def _section(report: str, name: str) -> str:
    """The report's `## name: title` section (up to the next `## `)."""
    start = report.index(f"\n## {name}: ")
    end = report.find("\n## ", start + 1)
    return report[start:end if end >= 0 else None]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_target_end_to_end(quick_run, name):
    command, out, root, failed = quick_run
    report = check_stamped_text(out / "README.md")
    section = _section(report, name)
    assert "**FAILED**" not in section, section
    assert failed is None or f"'{name}'" not in failed, failed
    table = read_stamped_csv(out / f"{name}.csv")
    assert len(table) > 0
    for column, values in QUICK[name].items():
        assert sorted(table[column]) == sorted(values), column
    assert (out / f"{name}.png").stat().st_size > 5_000
    assert f"`{command}`" in report and "simulated targets 2 at a time" in report
    assert f"| {name} | ran now (quick) | " in report
    assert "ran now (the reduced `--quick` sweep)" in section
    assert str(root) not in report
    for published in TARGETS[name].published:
        assert f"| {published.label} | {published.value:g} |" in section


def test_report_only_runs_nothing_and_redraws_from_the_store(run_cli, tmp_path, monkeypatch):
    import powerbench.tasks.reproduce as task

    out = tmp_path / "results"
    target = Target("good", _stamped_figure("good"), command=("no-such-task",),
                    command_title="would fail if it ran",
                    published=(Published("x", 2.0, lambda t: float(t.x.iloc[0]), "test"),))
    monkeypatch.setattr(task, "TARGETS", {"good": target})
    run_cli(["reproduce", "task.report_only=true", f"task.out_dir={out}"])
    report = check_stamped_text(out / "README.md")
    assert "`powerbench reproduce task.report_only=true`" in report
    assert "| good | earlier runs | - | 1 | 1 of 1 |" in report
