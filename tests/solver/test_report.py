"""Placement metrics, per-layer artifacts, the split plot and metric logging."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from powerbench.solver import log_placement, solve, summary
from powerbench.solver.config import GreedyConfig

from .conftest import BARE, machine, profile_from_counts, tiny_spec

NEURON = 32.0


@pytest.fixture
def placed():
    spec = tiny_spec()
    counts = np.array([[900, 10, 0, 0, 0], [500, 400, 300, 0, 0], [50, 40, 30, 20, 10]])
    profile = profile_from_counts(counts)
    hw = machine(gpu_bytes=4 * NEURON, cpu_bytes=1e6)
    placement = solve(GreedyConfig(communication="off", **BARE), spec, profile, hw)
    return placement, profile


def test_metrics_by_hand(placed):
    placement, profile = placed
    # top-4 by frequency: 0.9 (L0), 0.5, 0.4, 0.3 (L1)
    assert [ids.tolist() for ids in placement.gpu_neurons] == [[0], [0, 1, 2], []]
    m = placement.metrics(profile)
    total = (900 + 10 + 500 + 400 + 300 + 50 + 40 + 30 + 20 + 10) / 1000
    assert m["gpu_neuron_load_share"] == pytest.approx(2.1 / total)
    assert m["gpu_neuron_share"] == pytest.approx(4 / 15)
    assert m["gpu_weight_bytes"] == pytest.approx(4 * NEURON)
    assert m["gpu_layers"] == 0
    assert m["solver_objective"] == pytest.approx(2.1)
    assert m["solver_gap"] == 0.0


def test_per_layer_frame_and_artifacts(placed, tmp_path):
    placement, profile = placed
    frame = placement.to_frame(profile)
    assert list(frame["gpu_neurons"]) == [1, 3, 0]
    assert frame["gpu_load_share"].tolist() == pytest.approx([0.9 / 0.91, 1.2 / 1.2, 0.0])
    paths = placement.write_artifacts(tmp_path, profile)
    names = sorted(p.name for p in paths)
    assert names == ["placement.json", "placement_layers.csv", "placement_split.png"]
    csv = pd.read_csv(tmp_path / "placement_layers.csv")
    assert len(csv) == 3 and csv["gpu_neurons"].sum() == 4
    assert (tmp_path / "placement_split.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "placement.json").read_text())
    assert data["gpu_bytes"]["ffn"] == pytest.approx(4 * NEURON)
    assert data["metrics"]["gpu_neuron_load_share"] == pytest.approx(
        placement.metrics(profile)["gpu_neuron_load_share"])
    assert summary(placement)["gpu_neurons_per_layer"] == [1, 3, 0]


class FakeTracker:
    def __init__(self):
        self.metrics: dict[str, float] = {}
        self.artifacts: list[tuple[str, str | None]] = []

    def log_metrics(self, metrics, step=0):
        self.metrics.update(metrics)

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append((str(path), artifact_path))


def test_log_placement_logs_metrics_and_artifacts(placed, tmp_path):
    placement, profile = placed
    tracker = FakeTracker()
    logged = log_placement(placement, profile, tmp_path, tracker=tracker)
    assert tracker.metrics == logged
    for name in ("gpu_neuron_load_share", "gpu_weight_bytes", "cpu_weight_bytes", "gpu_layers",
                 "solve_time_s", "solver_gap"):
        assert name in tracker.metrics
    assert len(tracker.artifacts) == 3 and all(a == "placement" for _, a in tracker.artifacts)
