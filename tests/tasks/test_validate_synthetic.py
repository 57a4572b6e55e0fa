"""`powerbench validate model@task.synthetic_model=...`: the twin on synthetic-weight shapes,
reported through the measurement harness."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest

from powerbench.tasks.validate_synthetic import realsize_section

TINY = ["spec.d_model=64", "spec.d_ffn=256", "spec.n_heads=4", "spec.n_kv_heads=4",
        "spec.vocab_size=300", "spec.max_positions=64"]
SHAPE = [f"task.synthetic_model.{o}" for o in TINY]  # the composed model's keys
FAST_LOCAL = ["hardware.mem_mb=32", "hardware.gemv_dim=512", "hardware.gemm_dim=128",
              "hardware.repeats=2", "hardware.sync_iters=200", "hardware.storage=false",
              "hardware.kernel_samples=2", "hardware.kernel_sample_window_s=0",
              "hardware.kernel_working_set_mb=64", "hardware.kernel_repeats=3"]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One cache_dir for both models' runs: the local profile is measured once, into it."""
    return tmp_path_factory.mktemp("validate_cache")


@pytest.mark.parametrize("model", ["opt_6_7b", "llama_reglu_7b"])
def test_validate_synthetic_end_to_end(run_cli, tmp_path, capsys, model, shared_cache):
    run_dir = tmp_path / "run"
    argv = ["validate", f"model@task.synthetic_model={model}", *SHAPE, f"cache_dir={shared_cache}",
            "task.layers=2", "task.dtype=fp32", "task.rounds=2", f"hydra.run.dir={run_dir}",
            "bench.prompt_tokens=4", "bench.new_tokens=4", "bench.repeats=1",
            "bench.warmup=0", *FAST_LOCAL]
    run_cli(argv)
    printed = capsys.readouterr().out
    # the local profile is measured into (or read from) the run's cache_dir
    assert list((shared_cache / "hardware").glob("local-*.json"))
    assert "SYNTHETIC weights: only speed is meaningful" in printed
    assert "measured on this machine" in printed  # the harness's header
    (csv,) = run_dir.glob("realsize_*.csv")  # the report, in the run's own directory
    assert csv.with_suffix(".png").exists()  # and its figure
    frame = pd.read_csv(csv)
    assert set(frame["weights"]) == {"synthetic"} and set(frame["layers"]) == {2}
    assert sorted(set(frame["engine"])) == ["dense", "sparse_cpu"]
    assert set(frame["hardware_variant"]) == {"profile", "calibrated"} and len(frame) == 4
    assert (frame["measured_decode_tokens_per_s"] > 0).all()
    assert (frame["sim_decode_tokens_per_s"] > 0).all() and frame["sim_error_pct"].notna().all()
    assert frame["started"].notna().all() and (frame["load_avg_1m_before"] >= 0).all()
    # the spread of the rates charged: the profile's 2 samples, the 3 in-run calibrations
    assert frame["cpu_bw_spread_pct"].notna().all() and (frame["cpu_bw_spread_pct"] >= 0).all()
    assert "the median of 2 sample(s) each" in printed
    mlflow.set_tracking_uri(run_cli.store)
    runs = mlflow.search_runs(experiment_names=["validation_realsize"])
    assert len(runs) == 1 and runs.iloc[0]["tags.powerbench.study"] == "validation"
    metrics = runs.iloc[0]
    for engine in ("dense", "sparse_cpu"):
        for variant in ("profile", "calibrated"):
            assert pd.notna(metrics[f"metrics.{engine}.{variant}.sim_error_pct"])
    assert pd.notna(metrics["metrics.sparse_cpu.calibrated.sim_error_paired_pct"])
    assert "metrics.dense.profile.sim_error_paired_pct" not in runs  # calibrated rows only
    run_cli(argv)  # the same job again: skipped through the job ledger
    assert "skipped: this job finished before" in capsys.readouterr().out
    assert len(mlflow.search_runs(experiment_names=["validation_realsize"])) == 1


def test_unknown_engine_is_refused(run_cli, capsys):
    with pytest.raises(SystemExit):
        run_cli(["validate", "model@task.synthetic_model=opt_6_7b", *SHAPE,
                 "task.layers=1", "task.engines=[flash]", *FAST_LOCAL])
    assert "neither `dense` nor a sparse backend" in capsys.readouterr().err


def test_realsize_section_lists_the_newest_reports(tmp_path):
    row = {"started": "2026-11-25 20:00:00 UTC", "dtype": "fp16", "threads": 1, "layers": 8,
           "engine": "dense", "hardware_variant": "profile",
           "measured_decode_tokens_per_s": 10.0, "sim_decode_tokens_per_s": 11.0,
           "sim_error_pct": 10.0, "measured_prefill_tokens_per_s": 50.0,
           "sim_prefill_tokens_per_s": 45.0, "sim_prefill_error_pct": -10.0,
           "load_avg_1m_before": 1.0, "load_avg_1m_after": 1.2}
    pd.DataFrame([row]).to_csv(tmp_path / "realsize_a_fp16.csv", index=False)
    newer = {**row, "started": "2026-11-25 21:00:00 UTC", "dtype": "fp32"}
    pd.DataFrame([newer]).to_csv(tmp_path / "realsize_a_fp32.csv", index=False)
    spread = {**row, "started": "2026-11-25 22:00:00 UTC", "dtype": "bf16",
              "cpu_bw_spread_pct": 31.6, "cpu_gflops_spread_pct": 4.2}
    pd.DataFrame([spread]).to_csv(tmp_path / "realsize_a_bf16.csv", index=False)
    assert "| +10.0% | 32% | 50 | 45 | -10.0% | 4% |" in realsize_section(tmp_path, 1)
    text = realsize_section(tmp_path, reports=2).split("| bf16 |")[0]
    assert "| fp32 |" in text and "| fp16 |" not in text and "+10.0%" in text
    assert "| +10.0% | - | 50 |" in text  # a CSV without spread columns: none shown
    assert "task.publish=true" in text  # the command that writes the rows
    assert "| fp16 |" in realsize_section(tmp_path, reports=3)
    assert realsize_section(tmp_path / "missing", 4) == ""
