"""One registry of metric names (powerbench.tracking.metrics): everything a run logs is
declared there (docs/metrics.md is generated from it); an unknown name fails."""

from __future__ import annotations

import pytest

from powerbench.config import load_config
from powerbench.pipeline import run_experiment
from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig
from powerbench.tracking.metrics import STRICT_ENV, UnknownMetricError, metric_spec


def test_unknown_metric_name_fails_under_strict(tmp_path, monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    tracker = Tracker(TrackingConfig(enabled=False))  # checked whether or not it is logged
    with pytest.raises(UnknownMetricError, match="not_a_declared_metric"):
        tracker.log_metrics({"sim_decode_tokens_per_s": 1.0, "not_a_declared_metric": 2.0})


def test_unknown_metric_name_only_warns_outside_tests(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(STRICT_ENV, "0")
    tracker = Tracker(TrackingConfig(enabled=False))
    tracker.log_metrics({"another_undeclared_metric": 1.0})
    assert "another_undeclared_metric" in caplog.text


def test_patterns_cover_families_and_exact_names_win():
    assert metric_spec("stage_profile_s").name == "stage_{stage}_s"
    assert metric_spec("sim_decode_tokens_per_s").name == "sim_decode_tokens_per_s"
    assert metric_spec("adaptive_decode_tokens_per_s").name == "{predictor}_decode_tokens_per_s"
    assert metric_spec("sparse_cpu.avx512.row.4096x16384.fp32.1.50.speedup") is not None
    assert metric_spec("error/fig10_avg_speedup").name == "error/{row}"
    assert metric_spec("made_up") is None


@pytest.mark.parametrize("overrides", [
    ["model=opt_13b", "hardware=pc_low", "solver=greedy", "simulator=cost_model",
     "predictor=adaptive", "~engine"],
    ["model=opt_175b", "hardware=pc_low", "solver=all_gpu", "simulator=cost_model", "~engine"],
    # 8 prompt and 8 output tokens log the same 61 names as the default 64/128
    # (checked side by side) in 5.5 s instead of 13.6 s
    pytest.param(["experiment=pi2_decode", "bench.prompt_tokens=8", "bench.new_tokens=8"],
                 marks=pytest.mark.slow),
], ids=["cost_model", "infeasible", "phone"])
def test_every_metric_a_simulated_pipeline_logs_is_registered(overrides, tmp_path, monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    cfg = load_config([*overrides, "tracking=disabled"])  # names are checked all the same
    ctx = run_experiment(cfg, tmp_path / "out")  # raises on an undeclared name
    assert ctx.metrics and all(metric_spec(name) for name in ctx.metrics)
