"""MLflow runs -> pandas: what every figure function starts from."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from powerbench.tracking.queue import queued
from powerbench.tracking.store import is_remote, resolve_uri, server_reachable

# (solver, engine mode) -> the system it reproduces (experiment option experiment/system)
SYSTEMS: dict[tuple[str, str], str] = {
    ("ilp", "sparse"): "PowerInfer",
    ("layer_offload", "dense"): "llama.cpp",
}


@dataclass
class FigureOutput:
    name: str
    csv: Path
    png: Path
    table: pd.DataFrame


def search_runs(experiment: str, tracking_uri: str | None = None,
                filter_string: str = "") -> pd.DataFrame:
    """Finished runs of `experiment` (empty frame if the experiment does not exist).

    A tracking server that does not answer one probe (no MLflow retries) is not waited
    for: the runs queued on disk for it (powerbench.tracking.queue: every run computed
    while it was down, e.g. the sweep `reproduce` has just run) are read instead; their
    `filter_string` is not applied (callers filter the frame).
    """
    import mlflow

    uri = resolve_uri(tracking_uri)
    if is_remote(uri) and not _server_up(uri):
        return queued_runs(experiment, uri)
    mlflow.set_tracking_uri(uri)
    found = mlflow.MlflowClient(uri).get_experiment_by_name(experiment)
    if found is None:  # not run into this store yet (asked by name, MLflow would warn)
        return pd.DataFrame()
    status = "attributes.status = 'FINISHED'"
    query = f"{status} and {filter_string}" if filter_string else status
    runs = mlflow.search_runs(experiment_ids=[found.experiment_id], filter_string=query,
                              output_format="pandas")
    return runs if isinstance(runs, pd.DataFrame) else pd.DataFrame()


_PROBES: dict[str, tuple[float, bool]] = {}  # uri -> (when, up): one probe per minute


def _server_up(uri: str, ttl_s: float = 60.0) -> bool:
    """`server_reachable`, remembered for `ttl_s` (a report draws many figures at once)."""
    now = time.monotonic()
    seen = _PROBES.get(uri)
    if seen is None or now - seen[0] > ttl_s:
        seen = _PROBES[uri] = (now, server_reachable(uri))
    return seen[1]


def queued_runs(experiment: str, uri: str) -> pd.DataFrame:
    """The FINISHED runs of `experiment` queued on disk for the store `uri`, as a frame
    shaped like `mlflow.search_runs`'s (run_id, status, start_time, params.*, metrics.*
    (last value), tags.*)."""
    rows = []
    for record in queued(uri):
        if record.experiment != experiment or record.status != "FINISHED":
            continue
        row: dict[str, object] = {
            "run_id": record.server_run_id or record.queue_id, "status": record.status,
            "experiment_id": None,
            "start_time": pd.Timestamp(record.created_ms, unit="ms", tz="UTC")}
        row.update({f"params.{k}": v for k, v in record.params.items()})
        for key, value, _ms, _step in record.metrics:  # in logging order: the last one wins
            row[f"metrics.{key}"] = value
        row.update({f"tags.{k}": v for k, v in record.tags.items()})
        row["tags.mlflow.runName"] = record.run_name
        rows.append(row)
    return pd.DataFrame(rows)


def column(runs: pd.DataFrame, name: str, default: object = None) -> pd.Series:
    """A params./metrics./tags. column, or `default` everywhere when no run logged it."""
    if name in runs.columns:
        return runs[name]
    return pd.Series([default] * len(runs), index=runs.index, dtype=object)


def system_label(solver: str | None, mode: str | None) -> str:
    return SYSTEMS.get((str(solver), str(mode)), f"{solver}+{mode}")


def latest(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The most recent run of each `keys` combination (re-runs replace older ones)."""
    if frame.empty:
        return frame
    return (frame.sort_values("start_time").groupby(keys, as_index=False, dropna=False)
            .tail(1).reset_index(drop=True))


def find_simulated_runs(experiment: str, tracking_uri: str | None,
                   simulator: str = "cost_model") -> pd.DataFrame:
    """Finished runs of `experiment` made by `simulator`; LookupError when there are none."""
    runs = search_runs(experiment, tracking_uri)
    if not runs.empty:
        runs = runs[column(runs, "params.simulator.name") == simulator]
    if runs.empty:
        raise LookupError(f"no finished {simulator} runs in MLflow experiment {experiment!r} "
                          f"({tracking_uri or 'default store'}); run: powerbench --multirun "
                          f"experiment={experiment}")
    return runs


def bench_lengths(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """The runs' prompt tokens, new tokens and batch size (`bench.*`), as numbers."""
    return {name: pd.to_numeric(column(runs, f"params.bench.{name}"))
            for name in ("prompt_tokens", "new_tokens", "batch_size")}


def simulated_columns(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """What every simulated figure keys on: hardware, model, dtype, bench lengths, the
    system (solver + compute mode), whether it fit, and the start time (for `latest`)."""
    solver, mode = column(runs, "params.solver.name"), column(runs, "params.simulator.mode")
    return {
        "hardware": column(runs, "params.hardware.name"),
        "model": column(runs, "params.model.name"),
        "weight_dtype": column(runs, "params.model.weight_dtype"),
        **bench_lengths(runs),
        "solver": solver, "mode": mode,
        "system": pd.Series([system_label(s, m) for s, m in zip(solver, mode, strict=True)],
                            index=runs.index),
        "fits": pd.to_numeric(column(runs, "metrics.sim_feasible", 1.0)).fillna(1.0) > 0,
        "start_time": runs["start_time"],
    }
