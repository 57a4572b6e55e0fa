"""Figures 14, 15, 16, 18 and tables 6, 7 read their runs from MLflow and derive the table.

Most runs are hand-made (logged with the Tracker into a temporary sqlite store); fig18 is
also checked end to end on a quick sweep run through the CLI.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from powerbench.figures.paper_more import fig14, fig15, fig18, fig18_ratio
from powerbench.figures.paper_tables import fig16, table6, table7
from powerbench.figures.runs import search_runs
from powerbench.reproduce import TARGETS
from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig


def _sim(tracker: Tracker, model: str, solver: str, mode: str, tps: float | None, *,
         hardware: str = "pc_high", batch: int = 1, prompt: int = 64,
         extra: dict[str, float] | None = None) -> None:
    params = {"simulator": {"name": "cost_model", "mode": mode}, "solver": {"name": solver},
              "hardware": {"name": hardware}, "model": {"name": model, "weight_dtype": "fp16"},
              "bench": {"new_tokens": 128, "prompt_tokens": prompt, "batch_size": batch}}
    with tracker.run(f"{model}-{solver}-{mode}"):
        tracker.log_params(params)
        if tps is None:
            tracker.log_metrics({"sim_feasible": 0.0})
        else:
            tracker.log_metrics({"sim_feasible": 1.0, "sim_end_to_end_tokens_per_s": tps,
                                 "sim_decode_tokens_per_s": 2 * tps, **(extra or {})})
    time.sleep(0.01)  # distinct start times: the later run of a combination wins


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"

    def tracker(experiment: str) -> Tracker:
        return Tracker(TrackingConfig(uri=uri, experiment=experiment))

    t = tracker("fig14_batch")
    for batch, (pi, lc) in {1: (8.0, 1.0), 8: (24.0, 6.0), 32: (40.0, 20.0)}.items():
        _sim(t, "falcon_relu_40b", "ilp", "sparse", pi, batch=batch)
        _sim(t, "falcon_relu_40b", "layer_offload", "dense", lc, batch=batch)
    t = tracker("fig15_ablation")
    for model, (lc, po, eng, pol) in {"opt_30b": (1.0, 1.5, 8.0, 10.0),
                                      "opt_66b": (0.5, 0.4, 2.0, None)}.items():
        for (solver, mode), tps in zip((("layer_offload", "dense"), ("greedy", "dense"),
                                        ("greedy", "sparse"), ("ilp", "sparse")),
                                       (lc, po, eng, pol), strict=True):
            _sim(t, model, solver, mode, tps)
    t = tracker("fig18_a100")
    for prompt, (pi, a100) in {1: (12.0, 30.0), 64: (10.0, 25.0)}.items():
        _sim(t, "opt_30b", "ilp", "sparse", pi, prompt=prompt)
        _sim(t, "opt_30b", "all_gpu", "dense", a100, hardware="a100", prompt=prompt)
    _sim(t, "llama_reglu_70b", "all_gpu", "dense", None, hardware="a100")
    _sim(t, "llama_reglu_70b", "ilp", "sparse", 3.0)
    t = tracker("table6_predictors")
    _sim(t, "opt_30b", "ilp", "sparse", 10.0, extra={
        "model_params": 30e9, "sim_predictor_bytes": 1.2e9, "sim_predictor_param_share": 0.02,
        "sim_predictor_rank_mean": 512.0})
    _sim(t, "opt_66b", "ilp", "sparse", 4.0, extra={"model_params": 66e9})  # predates metrics
    _sim(t, "tiny_relu", "ilp", "sparse", 900.0, extra={
        "model_params": 1e6, "predictor_param_bytes": 40_000.0, "predictor_param_share": 0.02,
        "predictor_mean_rank": 16.0, "predictor_recall": 0.96})
    t = tracker("table7_accuracy")
    for predictor, ppl, mc in (("adaptive", 101.0, 0.40), ("fixed", 100.5, 0.45)):
        with t.run(f"tiny-{predictor}"):
            t.log_params({"model": {"name": "tiny_relu"}, "predictor": {"name": predictor}})
            t.log_metrics({"perplexity_dense": 100.0, "perplexity": ppl,
                           "mc_accuracy_dense": 0.45, "mc_accuracy": mc, "mc_items": 20,
                           "eval_tokens": 2048, "eval_predictor_recall": 0.95,
                           "predictor_param_share": 0.08})
    t = tracker("operators")
    with t.run("operators_cpu_quick", tags={"measured": "true"}):
        t.log_params({"device": "cpu", "quick": True})
        t.log_metrics({"speedup/sparse_cpu/row/4096x16384/fp32/b1/s50": 1.8,
                       "time_us/sparse_cpu/row/4096x16384/fp32/b1/s50": 10.0,
                       "speedup/sparse_cpu/row/4096x16384/fp32/b1/s99": 50.0,
                       "time_us/sparse_cpu/row/4096x16384/fp32/b1/s99": 0.5,
                       "speedup/torch_dense/row/4096x16384/fp32/b1/s0": 1.0,
                       "time_us/torch_dense/row/4096x16384/fp32/b1/s0": 20.0,
                       "bandwidth_gbps": 25.0})
    return uri


def test_fig14_speedup_per_batch_size(store, tmp_path):
    out = fig14(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index("batch_size")
    assert list(table.index) == [1, 8, 32]
    assert table.loc[8].speedup == pytest.approx(4.0)
    assert table.loc[32].decode_speedup == pytest.approx(2.0)
    assert out.csv.read_text().splitlines()[0].startswith(
        "hardware,model,weight_dtype,prompt_tokens,new_tokens,batch_size")
    assert out.png.stat().st_size > 10_000


def test_fig15_steps_and_speedups_over_llamacpp(store, tmp_path):
    table = fig15(tracking_uri=store, out_dir=tmp_path).table.set_index("model")
    row = table.loc["opt_30b"]
    assert (row.po_speedup, row.engine_speedup, row.policy_speedup) == pytest.approx(
        (1.5, 8.0, 10.0))
    assert not table.loc["opt_66b"].policy_fits
    assert np.isnan(table.loc["opt_66b"].policy_speedup)
    assert table.loc["opt_66b"].po_speedup == pytest.approx(0.8)


def test_fig18_ratio_is_powerinfer_over_a100(store, tmp_path):
    out = fig18(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index(["model", "prompt_tokens"])
    assert table.loc[("opt_30b", 1)].ratio == pytest.approx(0.4)
    assert table.loc[("opt_30b", 64)].ratio == pytest.approx(0.4)
    assert not table.loc[("llama_reglu_70b", 64)].a100_fits
    assert np.isnan(table.loc[("llama_reglu_70b", 64)].ratio)
    published = TARGETS["fig18"].published[0]
    assert published.calibration and published.value == 0.82
    assert published.ours(out.table) == pytest.approx(10.0 / 25.0)
    with pytest.raises(LookupError, match="opt_13b"):
        fig18_ratio(out.table, model="opt_13b")
    # the target's table from a frame of runs (experiments/fit_efficiency.py) is the figure's
    runs = search_runs("fig18_a100", store)
    pd.testing.assert_frame_equal(TARGETS["fig18"].table(runs), out.table)


def test_table6_simulated_and_measured_rows(store, tmp_path):
    table = table6(tracking_uri=store, out_dir=tmp_path).table
    rows = {(r.model, r.source): r for r in table.itertuples()}
    assert rows[("opt_30b", "SIMULATED")].predictor_mb == pytest.approx(1200.0)
    assert rows[("opt_30b", "SIMULATED")].predictor_param_share_pct == pytest.approx(2.0)
    assert np.isnan(rows[("opt_66b", "SIMULATED")].predictor_mb)  # older run: NaN
    tiny = rows[("tiny_relu", "MEASURED")]
    assert (tiny.predictor_mb, tiny.predictor_rank_mean) == pytest.approx((0.04, 16.0))
    assert ("opt_30b", "MEASURED") not in rows


def test_table7_deltas(store, tmp_path):
    out = table7(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index("predictor")
    assert table.loc["adaptive"].perplexity_delta_pct == pytest.approx(1.0)
    assert table.loc["adaptive"].mc_delta_points == pytest.approx(-5.0)
    assert table.loc["fixed"].mc_delta_points == pytest.approx(0.0)
    assert "cannot run" in table.loc["fixed"].note
    assert out.png.stat().st_size > 5_000


def test_fig16_rows_from_the_operator_metrics(store, tmp_path):
    out = fig16(tracking_uri=store, out_dir=tmp_path)
    table = out.table
    row = table[(table.backend == "sparse_cpu") & (table.sparsity == 0.99)].iloc[0]
    assert row.speedup == 50.0 and row.dense_time_us == pytest.approx(25.0)
    assert row.ideal_speedup == pytest.approx(100.0)
    assert (table.backend == "torch_dense").sum() == 1
    assert table.cpu_model.iloc[0]  # the run's host_cpu tag
    with pytest.raises(LookupError, match="task.device=cuda"):
        fig16(tracking_uri=store, out_dir=tmp_path, device="cuda")


def test_missing_experiment_names_the_sweep(store, tmp_path):
    with pytest.raises(LookupError, match="experiment=nothing_here"):
        fig14(tracking_uri=store, out_dir=tmp_path, experiment="nothing_here")


@pytest.mark.parametrize("experiment, system, solver, mode, hardware", [
    ("fig15_ablation", "llamacpp", "layer_offload", "dense", "pc_high"),
    ("fig15_ablation", "po", "greedy", "dense", "pc_high"),
    ("fig15_ablation", "po_engine", "greedy", "sparse", "pc_high"),
    ("fig15_ablation", "powerinfer", "ilp", "sparse", "pc_high"),
    ("fig18_a100", "powerinfer_pc_high", "ilp", "sparse", "pc_high"),
    ("fig18_a100", "vllm", "all_gpu", "dense", "a100")])
def test_system_options_compose(experiment, system, solver, mode, hardware):
    """(An experiment that overrides /hardware itself wins over vllm's a100: fig18_a100 lets
    the system choose the hardware.)"""
    from hydra import compose

    from powerbench.config import hydra_context

    with hydra_context():
        cfg = compose("config", overrides=[f"experiment={experiment}",
                                           f"experiment/system={system}"])
    assert (cfg.solver.name, cfg.simulator.mode, cfg.hardware.name) == (solver, mode, hardware)


def test_fig18_quick_sweep_through_the_cli(run_cli, tmp_path):
    """The quick sweep of one model and one input length, then the figure on its runs."""
    run_cli(["--multirun", "experiment=fig18_a100", "model=opt_13b", "bench.prompt_tokens=64",
             "bench.new_tokens=16"])
    out = fig18(tracking_uri=run_cli.store, out_dir=tmp_path)
    row = out.table.iloc[0]
    assert (row.model, row.prompt_tokens) == ("opt_13b", 64)
    assert row.powerinfer_fits and row.a100_fits
    assert row.ratio == pytest.approx(row.powerinfer_tokens_per_s / row.a100_tokens_per_s)
    assert 0 < row.ratio < 10
