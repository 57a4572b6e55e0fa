"""The e2e figure reads simulated runs from MLflow and writes the table and the PNG."""

from __future__ import annotations

import time

import pytest

from powerbench.figures.e2e import e2e_figure
from powerbench.tracking import Tracker
from powerbench.tracking.config import TrackingConfig


def _log(tracker: Tracker, model: str, dtype: str, new: int, solver: str, mode: str,
         tps: float | None, load: float = 0.5, hardware: str = "pc_high") -> None:
    params = {"simulator": {"name": "cost_model", "mode": mode}, "solver": {"name": solver},
              "hardware": {"name": hardware}, "model": {"name": model, "weight_dtype": dtype},
              "bench": {"new_tokens": new, "prompt_tokens": 64, "batch_size": 1}}
    with tracker.run(f"{model}-{solver}"):
        tracker.log_params(params)
        if tps is None:
            tracker.log_metrics({"sim_feasible": 0.0})
        else:
            tracker.log_metrics({"sim_feasible": 1.0, "sim_end_to_end_tokens_per_s": tps,
                                 "sim_decode_tokens_per_s": 2 * tps,
                                 "sim_prefill_tokens_per_s": 50.0,
                                 "sim_gpu_neuron_load_share": load,
                                 "sim_gpu_compute_share": load / 2})
    time.sleep(0.01)  # distinct start times: the later run of a combination wins


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    tracker = Tracker(TrackingConfig(uri=uri, experiment="pc_high_e2e"))
    _log(tracker, "opt_30b", "fp16", 128, "layer_offload", "dense", 1.0, load=0.2)
    _log(tracker, "opt_30b", "fp16", 128, "ilp", "sparse", 3.0, load=0.9)  # replaced below
    _log(tracker, "opt_30b", "fp16", 128, "ilp", "sparse", 8.0, load=0.7)
    _log(tracker, "opt_30b", "int4", 8, "layer_offload", "dense", 2.0)
    _log(tracker, "opt_30b", "int4", 8, "ilp", "sparse", 5.0)
    _log(tracker, "opt_175b", "fp16", 8, "layer_offload", "dense", None)
    _log(tracker, "opt_175b", "fp16", 8, "ilp", "sparse", None)
    _log(tracker, "opt_13b", "fp16", 8, "ilp", "sparse", 9.0, hardware="pc_low")
    return uri


def test_table_pairs_systems_and_takes_the_latest_run(store, tmp_path):
    out = e2e_figure("pc_high_e2e", "pc_high", tracking_uri=store, out_dir=tmp_path)
    table = out.table.set_index(["model", "weight_dtype", "new_tokens"])
    row = table.loc[("opt_30b", "fp16", 128)]
    assert row.powerinfer_tokens_per_s == 8.0 and row.llamacpp_tokens_per_s == 1.0
    assert row.speedup == pytest.approx(8.0)
    assert row.decode_speedup == pytest.approx(8.0)
    assert row.powerinfer_gpu_neuron_load_share == pytest.approx(0.7)
    assert row.llamacpp_gpu_neuron_load_share == pytest.approx(0.2)
    assert table.loc[("opt_30b", "int4", 8)].speedup == pytest.approx(2.5)
    big = table.loc[("opt_175b", "fp16", 8)]
    assert not big.powerinfer_fits and not big.llamacpp_fits
    assert "opt_13b" not in out.table.model.values  # another hardware profile
    assert out.csv.read_text().startswith("hardware,model,weight_dtype,new_tokens")
    assert out.png.stat().st_size > 10_000


def test_no_runs_says_which_command_makes_them(store, tmp_path):
    with pytest.raises(LookupError, match=r"experiment=pc_high_e2e"):
        e2e_figure("pc_high_e2e", "a100", tracking_uri=store, out_dir=tmp_path)
