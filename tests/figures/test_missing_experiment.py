"""Reading the runs of an experiment a store does not have yet (a report over a private
store that ran one target) is an empty frame, without MLflow's warning."""

from __future__ import annotations

import logging

import mlflow

from powerbench.figures.runs import search_runs


def test_an_experiment_not_in_the_store_is_empty_without_a_warning(tmp_path, caplog):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(store)
    experiment_id = mlflow.create_experiment("fig12")
    with mlflow.start_run(experiment_id=experiment_id):
        mlflow.log_metric("sim_decode_tokens_per_s", 3.0)
    with caplog.at_level(logging.WARNING):
        assert search_runs("fig10", store).empty
        runs = search_runs("fig12", store)
    assert list(runs["metrics.sim_decode_tokens_per_s"]) == [3.0]
    assert "Cannot retrieve experiment" not in caplog.text, caplog.text
