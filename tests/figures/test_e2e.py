"""The PC figures read simulated runs from MLflow and write the table and the PNG."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from powerbench.figures.e2e import e2e_runs
from powerbench.figures.runs import search_runs
from powerbench.reproduce import TARGETS
from powerbench.reproduce.report import compare
from powerbench.reproduce.targets import fig10, fig12
from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig


def _log(tracker: Tracker, model: str, dtype: str, new: int, solver: str, mode: str,
         tps: float | None, load: float = 0.5, hardware: str = "pc_high", prompt: int = 64,
         ffn: float | None = None) -> None:
    params = {"simulator": {"name": "cost_model", "mode": mode}, "solver": {"name": solver},
              "hardware": {"name": hardware}, "model": {"name": model, "weight_dtype": dtype},
              "bench": {"new_tokens": new, "prompt_tokens": prompt, "batch_size": 1}}
    with tracker.run(f"{model}-{solver}"):
        tracker.log_params(params)
        if tps is None:
            tracker.log_metrics({"sim_feasible": 0.0})
        else:
            tracker.log_metrics({"sim_feasible": 1.0, "sim_end_to_end_tokens_per_s": tps,
                                 "sim_decode_tokens_per_s": 2 * tps,
                                 "sim_prefill_tokens_per_s": 50.0,
                                 "sim_gpu_neuron_load_share": load,
                                 "sim_gpu_compute_share": load / 2,
                                 **({} if ffn is None else {"sim_gpu_ffn_load_share": ffn})})
    time.sleep(0.01)  # distinct start times: the later run of a combination wins


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="fig10"))
    _log(tracker, "opt_30b", "fp16", 128, "layer_offload", "dense", 1.0, load=0.2)
    _log(tracker, "opt_30b", "fp16", 128, "ilp", "sparse", 3.0, load=0.9)  # replaced below
    _log(tracker, "opt_30b", "fp16", 128, "ilp", "sparse", 8.0, load=0.7)
    _log(tracker, "opt_30b", "fp16", 128, "layer_offload", "dense", 2.0, prompt=128)
    _log(tracker, "opt_30b", "fp16", 128, "ilp", "sparse", 5.0, prompt=128)
    _log(tracker, "opt_175b", "fp16", 8, "layer_offload", "dense", None)
    _log(tracker, "opt_175b", "fp16", 8, "ilp", "sparse", None)
    tracker = Tracker(TrackingConfig(uri=uri, experiment="fig12"))
    _log(tracker, "opt_30b", "fp16", 128, "layer_offload", "dense", 1.0, load=0.2)
    _log(tracker, "opt_30b", "fp16", 128, "ilp", "sparse", 8.0, load=0.7, ffn=0.8)
    return uri


def test_table_pairs_systems_per_prompt_length_and_takes_the_latest_run(store, tmp_path):
    out = fig10.figure(tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index(["model", "prompt_tokens", "new_tokens"])
    row = table.loc[("opt_30b", 64, 128)]
    assert row.powerinfer_tokens_per_s == 8.0 and row.llamacpp_tokens_per_s == 1.0
    assert row.speedup == pytest.approx(8.0) and row.decode_speedup == pytest.approx(8.0)
    assert row.powerinfer_gpu_neuron_load_share == pytest.approx(0.7)
    assert row.llamacpp_gpu_neuron_load_share == pytest.approx(0.2)
    assert table.loc[("opt_30b", 128, 128)].speedup == pytest.approx(2.5)
    big = table.loc[("opt_175b", 64, 8)]
    assert not big.powerinfer_fits and not big.llamacpp_fits
    assert out.csv.read_text().splitlines()[1].startswith(
        "hardware,model,weight_dtype,prompt_tokens,new_tokens")
    assert out.png.stat().st_size > 10_000


def test_load_split_tolerates_runs_without_the_ffn_share(store, tmp_path):
    row = fig12.figure(tracking_uri=store, out_dir=tmp_path).table.iloc[0]
    assert row.powerinfer_gpu_ffn_load_share == pytest.approx(0.8)
    assert row.llamacpp_gpu_ffn_load_share != row.llamacpp_gpu_ffn_load_share  # NaN: not logged
    assert (tmp_path / "fig12.png").stat().st_size > 10_000


def test_no_runs_says_which_command_makes_them(store):
    with pytest.raises(LookupError, match=r"powerbench reproduce fig11"):
        e2e_runs("fig11", store, how_to_run="powerbench reproduce fig11")


def test_targets_table_from_runs_is_the_figures_table(store, tmp_path):
    """Target.table (runs frame -> figure table, what experiments/fit_efficiency.py scores)
    gives the figure's own table, so its calibration rows are the report's."""
    out = fig10.figure(tracking_uri=store, out_dir=tmp_path)
    table = TARGETS["fig10"].table(search_runs("fig10", store))
    pd.testing.assert_frame_equal(table, out.table)
    ours = [c.ours for c in compare(TARGETS["fig10"], table)]
    assert ours[:3] == pytest.approx([8.0, 8.0, 8.0])  # mean, max tok/s, mean speedup
