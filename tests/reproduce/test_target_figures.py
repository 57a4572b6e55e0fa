"""Targets fig14-fig18, table6, table7 and pi2_ablation read their runs from MLflow and
derive their tables.

Most runs are hand-made (logged with the Tracker into a temporary sqlite store); fig18 is
also checked end to end on a quick sweep run through the CLI.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest

from powerbench.figures.runs import search_runs
from powerbench.figures.stamp import read_stamped_csv
from powerbench.reproduce import TARGETS
from powerbench.reproduce.targets import fig14, fig15, fig16, fig17, fig18, table6, table7
from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig


def _sim(tracker: Tracker, model: str, solver: str, mode: str, tps: float | None, *,
         hardware: str = "pc_high", batch: int = 1, prompt: int = 64,
         extra: dict[str, float] | None = None, prefill: str = "gpu_stream") -> None:
    params = {"simulator": {"name": "cost_model", "mode": mode, "prefill": {"mode": prefill}},
              "solver": {"name": solver},
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
    steps = (("layer_offload", "dense", "gpu_stream"), ("greedy", "sparse", "gpu_stream"),
             ("greedy", "sparse", "hybrid"), ("ilp", "sparse", "hybrid"))
    for model, speeds in {"bamboo_7b": (1.0, 1.5, 8.0, 10.0),
                          "falcon_relu_40b": (0.5, 0.4, 2.0, None)}.items():
        for (solver, mode, prefill), tps in zip(steps, speeds, strict=True):
            _sim(t, model, solver, mode, tps, prefill=prefill)
    _sim(t, "bamboo_7b", "greedy", "dense", 99.0)  # no ablation step: left out
    t = tracker("fig18_a100")
    for prompt, (pi, a100) in {1: (12.0, 30.0), 64: (10.0, 25.0)}.items():
        _sim(t, "opt_30b", "ilp", "sparse", pi, prompt=prompt)
        _sim(t, "opt_30b", "all_gpu", "dense", a100, hardware="a100", prompt=prompt)
        _sim(t, "opt_30b", "layer_offload", "dense", pi / 4, prompt=prompt)
    _sim(t, "llama_reglu_70b", "all_gpu", "dense", None, hardware="a100")
    _sim(t, "llama_reglu_70b", "ilp", "sparse", 3.0)
    t = tracker("fig17_predictor_time")
    for model, share in {"opt_6_7b": 0.04, "opt_30b": 0.08}.items():
        _sim(t, model, "ilp", "sparse", 5.0, hardware="pc_low",
             extra={"sim_predictor_time_share": share})
    _sim(t, "opt_30b", "layer_offload", "dense", 1.0, hardware="pc_low")  # not PowerInfer
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
        t.log_params({"task": {"device": "cpu", "quick": True}})
        t.log_metrics({"sparse_cpu.avx512.row.4096x16384.fp32.1.50.speedup": 1.8,
                       "sparse_cpu.avx512.row.4096x16384.fp32.1.50.time_us": 10.0,
                       "sparse_cpu.avx512.row.4096x16384.fp32.1.99.speedup": 50.0,
                       "sparse_cpu.avx512.row.4096x16384.fp32.1.99.time_us": 0.5,
                       # the dense kernel's own median in that cell's rounds (not time x
                       # speedup: the speedup is the rounds' median ratio)
                       "sparse_cpu.avx512.row.4096x16384.fp32.1.99.dense_time_us": 24.0,
                       "torch_dense.-.row.4096x16384.fp32.1.0.speedup": 1.0,
                       "torch_dense.-.row.4096x16384.fp32.1.0.time_us": 20.0})
    return uri


def test_fig14_speedup_per_batch_size(store, tmp_path):
    out = fig14.figure(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index("batch_size")
    assert list(table.index) == [1, 8, 32]
    assert table.loc[8].speedup == pytest.approx(4.0)
    assert table.loc[32].decode_speedup == pytest.approx(2.0)
    assert out.csv.read_text().splitlines()[1].startswith(
        "hardware,model,weight_dtype,prompt_tokens,new_tokens,batch_size")
    assert out.png.stat().st_size > 10_000


def test_fig15_steps_and_speedups_over_llamacpp(store, tmp_path):
    """+PO and +Engine share solver and compute mode: the prompt path tells them apart."""
    out = fig15.figure(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index("model")
    row = table.loc["bamboo_7b"]
    assert (row.po_speedup, row.engine_speedup, row.policy_speedup) == pytest.approx(
        (1.5, 8.0, 10.0))
    assert not table.loc["falcon_relu_40b"].policy_fits
    assert np.isnan(table.loc["falcon_relu_40b"].policy_speedup)
    assert table.loc["falcon_relu_40b"].po_speedup == pytest.approx(0.8)
    pd.testing.assert_frame_equal(read_stamped_csv(out.csv), out.table, check_dtype=False)


def test_fig18_ratio_is_powerinfer_over_a100(store, tmp_path):
    out = fig18.figure(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index(["model", "prompt_tokens"])
    assert table.loc[("opt_30b", 1)].ratio == pytest.approx(0.4)
    assert table.loc[("opt_30b", 1)].llamacpp_ratio == pytest.approx(0.1)
    assert table.loc[("opt_30b", 64)].ratio == pytest.approx(0.4)
    assert not table.loc[("llama_reglu_70b", 64)].a100_fits
    assert np.isnan(table.loc[("llama_reglu_70b", 64)].ratio)
    published = TARGETS["fig18"].published[0]
    assert published.calibration and published.value == 0.82
    assert published.ours(out.table) == pytest.approx(10.0 / 25.0)
    with pytest.raises(LookupError, match="opt_13b"):
        fig18.ratio(out.table, model="opt_13b")
    # the target's table from a frame of runs (experiments/fit_efficiency.py) is the figure's
    runs = search_runs("fig18_a100", store)
    pd.testing.assert_frame_equal(TARGETS["fig18"].table(runs), out.table)


def test_table6_simulated_and_measured_rows(store, tmp_path):
    table = table6.figure(tracking_uri=store, out_dir=tmp_path).table
    rows = {(r.model, r.source): r for r in table.itertuples()}
    assert rows[("opt_30b", "SIMULATED")].predictor_mb == pytest.approx(1200.0)
    assert rows[("opt_30b", "SIMULATED")].predictor_param_share_pct == pytest.approx(2.0)
    assert np.isnan(rows[("opt_66b", "SIMULATED")].predictor_mb)  # older run: NaN
    tiny = rows[("tiny_relu", "MEASURED")]
    assert (tiny.predictor_mb, tiny.predictor_rank_mean) == pytest.approx((0.04, 16.0))
    assert ("opt_30b", "MEASURED") not in rows


def test_table7_deltas(store, tmp_path):
    out = table7.figure(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index("predictor")
    assert table.loc["adaptive"].perplexity_delta_pct == pytest.approx(1.0)
    assert table.loc["adaptive"].mc_delta_points == pytest.approx(-5.0)
    assert table.loc["fixed"].mc_delta_points == pytest.approx(0.0)
    assert "cannot run" in table.loc["fixed"].note
    assert out.png.stat().st_size > 5_000


def test_fig16_rows_from_the_operator_metrics(store, tmp_path):
    out = fig16.figure(tracking_uri=store, out_dir=tmp_path)
    table = out.table
    row = table[(table.backend == "sparse_cpu") & (table.sparsity == 0.99)].iloc[0]
    assert row.speedup == 50.0 and row.dense_time_us == pytest.approx(24.0)
    assert row.ideal_speedup == pytest.approx(100.0)
    assert (table.backend == "torch_dense").sum() == 1
    assert table.cpu_model.iloc[0]  # the run's host_cpu tag
    with pytest.raises(LookupError, match="task.device=cuda"):
        fig16.figure(tracking_uri=store, out_dir=tmp_path, device="cuda")


def test_fig16_crossover_sparsity_interpolates_past_the_last_loss():
    def table(backend, speedups, shape=fig16.PAPER_SHAPE):
        return pd.DataFrame(dict(backend=backend, op="row", shape=shape, dtype="fp32", batch=1,
                                 sparsity=list(speedups), speedup=list(speedups.values())))

    csr = fig16.crossover("torch_csr")
    # loses up to 80%, wins from 90%: 1 is crossed a third of the way from 0.8 to 0.9
    assert csr(table("torch_csr", {0.0: 0.05, 0.5: 0.2, 0.8: 0.7, 0.9: 1.6, 0.99: 9})) == \
        pytest.approx(0.8 + 0.3 / 0.9 * 0.1)
    # a win below a later loss does not count: the last loss is at 80%
    assert csr(table("torch_csr", {0.0: 0.5, 0.1: 1.2, 0.8: 0.9, 0.9: 1.1})) == \
        pytest.approx(0.85)
    assert csr(table("torch_csr", {0.0: 1.1, 0.5: 2.0})) == 0.0  # never loses
    assert math.isnan(csr(table("torch_csr", {0.0: 0.1, 0.9: 0.9})))  # never wins
    assert math.isnan(csr(table("torch_csr", {0.9: 2.0}, shape="4096x16384")))  # not measured
    # against torch's dense matmul, 1.5x slower than the faster kernel (its own speedup
    # 1/1.5, the rounds' median ratio; its medians' ratio is not used): speedups x 1.5
    kernels = pd.DataFrame(dict(backend="torch_dense", op="row", shape=fig16.PAPER_SHAPE,
                                dtype="fp32", batch=1, sparsity=[0.0], speedup=[1 / 1.5],
                                time_us=[3.3], dense_time_us=[2.0]))
    rows = pd.concat([table("torch_csr", {0.5: 0.4, 0.8: 0.6, 0.9: 1.0}), kernels])
    assert csr(rows) == pytest.approx(0.9)  # [0.6, 0.9, 1.5] after the rescaling:
    assert fig16.crossover("torch_csr", against="torch_dense")(rows) == \
        pytest.approx(0.8 + 0.1 * 0.1 / 0.6)
    published = {p.label: p for p in TARGETS["fig16"].published}
    assert [p.value for p in published.values()] == [0.87, 0.87, 0.87, 0.10]
    ours = next(p for label, p in published.items() if "neuron-aware" in label)
    assert ours.upper_bound and ours.within(0.02) and not ours.within(0.2)


def test_fig17_predictor_share_of_powerinfer_runs(store, tmp_path):
    out = fig17.figure(tracking_uri=store, out_dir=tmp_path)
    assert list(out.table.model) == ["opt_30b", "opt_6_7b"]
    assert list(out.table.predictor_time_share) == pytest.approx([0.08, 0.04])
    (published,) = TARGETS["fig17"].published
    assert published.ours(out.table) == pytest.approx(0.08)
    assert published.within(0.08) and not published.within(0.11)  # "under 10%": a bound


def test_missing_experiment_names_the_sweep(store, tmp_path):
    with pytest.raises(LookupError, match="experiment=nothing_here"):
        fig14.figure(tracking_uri=store, out_dir=tmp_path, experiment="nothing_here")


@pytest.mark.parametrize("experiment, system, solver, mode, hardware", [
    ("fig15_ablation", "llamacpp", "layer_offload", "dense", "pc_high"),
    ("fig15_ablation", "po", "greedy", "sparse", "pc_high"),
    ("fig15_ablation", "po_engine", "greedy", "sparse", "pc_high"),
    ("fig15_ablation", "powerinfer", "ilp", "sparse", "pc_high"),
    ("fig18_a100", "powerinfer_pc_high", "ilp", "sparse", "pc_high"),
    ("fig18_a100", "llamacpp_pc_high", "layer_offload", "dense", "pc_high"),
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
    out = fig18.figure(tracking_uri=run_cli.store, out_dir=tmp_path)
    row = out.table.iloc[0]
    assert (row.model, row.prompt_tokens) == ("opt_13b", 64)
    assert row.powerinfer_fits and row.a100_fits and row.llamacpp_fits
    assert row.ratio == pytest.approx(row.powerinfer_tokens_per_s / row.a100_tokens_per_s)
    assert 0 < row.ratio < 10


@pytest.mark.parametrize("system, bundle, hot_share, pipeline, prefill_unit", [
    ("pi2_baseline", "none", 1.0, False, "cpu"), ("pi2_bundle", "all", 1.0, False, "cpu"),
    ("pi2_cache", "all", 0.5, False, "cpu"), ("pi2_pipeline", "all", 0.5, True, "cpu"),
    ("pi2", "all", 0.5, True, "npu")])
def test_pi2_ablation_steps_are_cumulative(system, bundle, hot_share, pipeline, prefill_unit):
    """Each PowerInfer-2 ablation system adds one mechanism to the one before it, and the
    figure maps the composed values back to the step (its STEPS table)."""
    from powerbench.config import hydra_context, load_config
    from powerbench.reproduce.targets.pi2_ablation import STEPS

    with hydra_context():
        cfg = load_config(["experiment=pi2_ablation", f"experiment/system={system}"])
    got = (cfg.solver.bundle.value, cfg.solver.hot_share, cfg.simulator.pipeline,
           cfg.simulator.prefill_unit.value)
    assert got == (bundle, hot_share, pipeline, prefill_unit)
    assert cfg.solver.ffn_offload_fraction == 0.5 and cfg.model.name == "bamboo_7b"
    assert got in dict((k, label) for label, k in STEPS)


def test_po_and_engine_differ_in_the_prompt_path_only():
    from powerbench.config import hydra_context, load_config

    with hydra_context():
        po, engine = (load_config(["experiment=fig15_ablation", f"experiment/system={s}"])
                      for s in ("po", "po_engine"))
    assert (po.solver.name, po.predictor.name, po.simulator.mode.value) == \
        (engine.solver.name, engine.predictor.name, engine.simulator.mode.value) == \
        ("greedy", "adaptive", "sparse")
    assert (po.simulator.prefill.mode.value, engine.simulator.prefill.mode.value) == \
        ("gpu_stream", "hybrid")


def test_pi2_ablation_table_orders_steps_and_divides_by_the_baseline(tmp_path):
    from powerbench.reproduce.targets.pi2_ablation import STEPS, figure

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="pi2_ablation"))
    for i, (_, (bundle, hot, pipeline, unit)) in reversed(list(enumerate(STEPS))):
        with tracker.run(f"step{i}"):
            tracker.log_params({"simulator": {"name": "phone", "pipeline": pipeline,
                                              "prefill_unit": unit},
                                "solver": {"bundle": bundle, "hot_share": hot},
                                "hardware": {"name": "oneplus12"},
                                "model": {"name": "bamboo_7b"}})
            tracker.log_metrics({"sim_decode_tokens_per_s": 2.0 * (i + 1),
                                 "sim_prefill_tokens_per_s": 10.0 * (i + 1)})
    table = figure(tracking_uri=uri, out_dir=tmp_path).table
    assert list(table.step) == [label for label, _ in STEPS]
    assert list(table.decode_speedup_vs_baseline) == pytest.approx([1, 2, 3, 4, 5])


def test_calibration_set_is_the_ten_pc_rows() -> None:
    """The calibration set is issue 26's ten PC rows (fig10-13, fig18); PowerInfer-2 rows
    and the other countings shown beside fig10's rows are validation / not scored."""
    from powerbench.tasks.calibration_set import CALIBRATION

    calib = [(name, p.label) for name, t in TARGETS.items() for p in t.published
             if p.calibration]
    assert len(calib) == 10
    assert {name for name, _ in calib} == set(CALIBRATION)
    assert all(p.scored for t in TARGETS.values() for p in t.published if p.calibration)
    assert not any(p.label.startswith("[") for t in TARGETS.values() for p in t.published)
