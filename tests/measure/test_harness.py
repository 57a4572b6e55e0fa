"""The measurement harness: rounds, reports, publishing, skip-if-finished."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd
import pytest

from powerbench.measure.harness import (
    LoadWindow,
    MachineFacts,
    Report,
    best_isa,
    command_line,
    interleaved,
    metric_key,
    round_orders,
    run_benchmark,
)
from powerbench.measure.publish import STUDY_TITLES
from powerbench.paths import results_dir


def test_interleaved_warms_up_then_runs_each_variant_once_per_round_in_random_orders():
    calls: list[str] = []

    def variant(name):
        def once():
            calls.append(name)
            return len(calls)
        return once

    names = ["a", "b", "c"]
    results = interleaved({n: variant(n) for n in names}, rounds=40, warmup=1, log=None)
    assert calls[:3] == names  # the warm-up, in the given order
    rounds = [calls[3 + 3 * r: 6 + 3 * r] for r in range(40)]
    assert all(sorted(r) == names for r in rounds)
    # each variant's results in round order: the call numbers of its own calls
    assert results == {n: [3 + 3 * r + rounds[r].index(n) + 1 for r in range(40)]
                       for n in names}
    # the orders vary: every variant runs first in some round, and "b" does not always
    # follow "a" within a round (a rotated order would)
    assert {r[0] for r in rounds} == set(names)
    assert any(r.index("b") != r.index("a") + 1 for r in rounds if "a" != r[-1])
    # seeded: the same orders again
    first = list(calls)
    calls.clear()
    interleaved({n: variant(n) for n in names}, rounds=40, warmup=1, log=None)
    assert calls == first
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        interleaved({"x": variant("x")}, rounds=0)


def test_round_orders_are_seeded_permutations():
    names = ["a", "b", "c", "d"]
    orders = list(round_orders(names, 20))
    assert len(orders) == 20 and all(sorted(o) == names for o in orders)
    assert orders == list(round_orders(names, 20))
    assert orders != list(round_orders(names, 20, seed=1))
    assert len({tuple(o) for o in orders}) > 5


def test_best_isa_from_cpu_flags():
    assert best_isa({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"}) == "avx512"
    assert best_isa({"avx2", "fma", "f16c", "avx512f"}) == "avx2"
    assert best_isa({"sse4_2"}) == "portable"


def _report(**kw) -> Report:
    rows = [{"engine": "dense", "predictor": "none", "tok_s": 10.0, "note": "x", "ok": True},
            {"engine": "sparse cpu", "predictor": "oracle", "tok_s": 25.0, "note": "y",
             "ok": False, "gap": math.nan}]
    return Report(study="decode", name="probe", rows=rows, key=("engine", "predictor"), **kw)


def test_metric_names_are_row_key_dot_column_and_skip_non_numbers():
    metrics = _report().metric_dict()
    assert metrics == {"dense.none.tok_s": 10.0, "sparse_cpu.oracle.tok_s": 25.0}
    assert metric_key("a b/c+d") == "a_b_c_d"


def test_report_writes_csv_json_and_table(tmp_path):
    report = _report(title="probe table", notes=["synthetic"],
                     machine=MachineFacts.probe(), command="powerbench bench-probe x=1")
    files = report.write(tmp_path)
    assert [p.name for p in files] == ["probe.csv", "probe.json", "probe.txt"]
    assert list(pd.read_csv(files[0])["tok_s"]) == [10.0, 25.0]
    meta = json.loads(files[1].read_text())
    assert meta["machine"]["cpus"] >= 1 and meta["notes"] == ["synthetic"]
    text = files[2].read_text()
    assert "measured on this machine" in text and "sparse cpu" in text and "probe table" in text


def test_load_window_records_time_and_load():
    with LoadWindow() as window:
        pass
    assert window.started.endswith("UTC") and window.load_before >= 0 <= window.load_after
    assert "load average" in window.line()


def test_command_line_drops_machine_paths():
    line = command_line(["bench-decode", "task.rounds=3", "hydra.run.dir=/tmp/x/y"])
    assert line == "powerbench bench-decode task.rounds=3"
    assert command_line(["task=bench_solver", "task.publish=true"]) == (
        "powerbench bench-solver task.publish=true")


@dataclass
class _Cfg:
    cache_dir: str
    rerun: bool = False
    tracking: object = None


def test_run_benchmark_publishes_and_skips_a_finished_job(tmp_path, monkeypatch, capsys):
    import powerbench.paths

    monkeypatch.setattr(powerbench.paths, "results_dir", lambda: tmp_path / "results")
    monkeypatch.setattr("powerbench.tracking.jobs.job_identity", lambda cfg: "job-probe")
    measured = []

    def measure():
        measured.append(1)
        return _report()

    cfg = _Cfg(cache_dir=str(tmp_path / "cache"))
    reports = run_benchmark(cfg, tmp_path / "run", measure, publish_results=True)
    assert len(reports) == 1 and reports[0].load is not None and reports[0].machine is not None
    study = tmp_path / "results" / "decode"
    assert (study / "probe.csv").exists() and (study / "probe.md").exists()
    assert "[probe](probe.md)" in (study / "README.md").read_text()
    assert ("[decode](decode/README.md): " + STUDY_TITLES["decode"]
            in (tmp_path / "results" / "README.md").read_text())
    assert (study / "README.md").read_text().splitlines()[1] == "# " + STUDY_TITLES["decode"]
    assert "/run/" not in (study / "probe.md").read_text()  # no machine paths

    assert run_benchmark(cfg, tmp_path / "run2", measure) == []
    assert "skipped: this job finished before" in capsys.readouterr().out
    run_benchmark(_Cfg(cache_dir=cfg.cache_dir, rerun=True), tmp_path / "run3", measure)
    assert len(measured) == 2


def test_run_benchmark_measures_again_when_the_sources_changed(tmp_path, monkeypatch,
                                                                capsys):
    import powerbench.tracking.jobs
    import powerbench.tracking.provenance

    monkeypatch.setattr(powerbench.tracking.jobs, "job_identity", lambda cfg: "job-probe")
    real = powerbench.tracking.provenance.sources_fingerprint
    monkeypatch.setattr(powerbench.tracking.provenance, "sources_fingerprint", lambda: "old")
    measured = []

    def measure():
        measured.append(1)
        return _report()

    cfg = _Cfg(cache_dir=str(tmp_path / "cache"))
    run_benchmark(cfg, tmp_path / "run", measure)
    entry = json.loads((tmp_path / "cache" / "jobs" / "job-probe.json").read_text())
    assert entry["sources"] == "old"
    monkeypatch.setattr(powerbench.tracking.provenance, "sources_fingerprint", real)
    run_benchmark(cfg, tmp_path / "run2", measure)  # the real sources differ from "old"
    assert len(measured) == 2
    assert "measuring again: job job-probe finished before" in capsys.readouterr().out


def test_sources_fingerprint_follows_the_package_sources(tmp_path):
    from powerbench.tracking.provenance import sources_fingerprint

    (tmp_path / "ops").mkdir()
    kernel, readme = tmp_path / "ops" / "kernel.h", tmp_path / "ops" / "README.md"
    kernel.write_text("int x;")
    readme.write_text("notes")
    first = sources_fingerprint(tmp_path)
    readme.write_text("other notes")  # not a source
    assert sources_fingerprint(tmp_path) == first
    kernel.write_text("int y;")
    assert sources_fingerprint(tmp_path) != first
    assert len(sources_fingerprint()) == 16  # the package's own


def test_every_published_study_has_a_title():
    """results/README.md describes each harness study, not just repeats its folder name."""
    harness = [p.parent.name for p in results_dir().glob("*/README.md")
               if "generated by the benchmark harness" in p.read_text().splitlines()[0]]
    assert harness, "no harness study under results/"
    assert sorted(set(harness) - set(STUDY_TITLES)) == []
