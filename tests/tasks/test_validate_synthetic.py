"""`powerbench validate task.synthetic_model=...`: the twin on synthetic-weight shapes."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest

TINY = ["spec.d_model=64", "spec.d_ffn=256", "spec.n_heads=4", "spec.n_kv_heads=4",
        "spec.vocab_size=300", "spec.max_positions=64"]
FAST_LOCAL = ["hardware.mem_mb=32", "hardware.gemv_dim=512", "hardware.gemm_dim=128",
              "hardware.repeats=2", "hardware.sync_iters=200", "hardware.storage=false"]


@pytest.mark.parametrize("model", ["opt_6_7b", "llama_reglu_7b"])
def test_validate_synthetic_end_to_end(run_cli, tmp_path, capsys, model):
    out = tmp_path / "validation_realsize.csv"
    argv = ["validate", f"task.synthetic_model={model}", f"task.synthetic_overrides={TINY}",
            "task.layers=2", "task.dtype=fp32", "task.rounds=2", f"task.out={out}",
            "bench.prompt_tokens=4", "bench.new_tokens=4", "bench.repeats=1",
            "bench.warmup=0", *FAST_LOCAL]
    run_cli(argv)
    printed = capsys.readouterr().out
    assert "SYNTHETIC weights: only speed is meaningful" in printed
    frame = pd.read_csv(out)
    assert set(frame["weights"]) == {"synthetic"} and set(frame["layers"]) == {2}
    assert sorted(set(frame["engine"])) == ["dense", "sparse_cpu"]
    assert set(frame["hardware_variant"]) == {"profile", "calibrated"} and len(frame) == 4
    assert (frame["measured_decode_tokens_per_s"] > 0).all()
    assert (frame["sim_decode_tokens_per_s"] > 0).all() and frame["sim_error_pct"].notna().all()
    mlflow.set_tracking_uri(run_cli.store)
    runs = mlflow.search_runs(experiment_names=["validation_realsize"])
    assert len(runs) == 4 and set(runs["tags.weights"]) == {"synthetic"}
    assert runs["metrics.sim_error_pct"].notna().all()
    assert runs["metrics.sim_error_paired_pct"].notna().sum() == 2  # calibrated rows
    run_cli(argv[:5] + ["task.calibrate=false", *argv[6:]])  # a second run is appended
    again = pd.read_csv(out)
    assert len(again) == 6 and again["validation_batch"].nunique() == 2


def test_unknown_engine_is_refused(run_cli, capsys):
    with pytest.raises(SystemExit):
        run_cli(["validate", "task.synthetic_model=opt_6_7b", f"task.synthetic_overrides={TINY}",
                 "task.layers=1", "task.engines=[flash]", *FAST_LOCAL])
    assert "neither `dense` nor a sparse backend" in capsys.readouterr().err
