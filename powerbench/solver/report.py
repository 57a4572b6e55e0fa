"""Placement artifacts (per-layer CSV, JSON summary, split plot) and MLflow logging."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.solver.placement import GPU, Placement


class MetricsSink(Protocol):
    """What `log_placement` needs (powerbench.tracking.Tracker satisfies it)."""

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...


def summary(placement: Placement, profile: ActivationProfile | None = None) -> dict[str, Any]:
    """JSON-able description: bytes per device, dense-part devices, solver stats."""
    out: dict[str, Any] = {
        "solver": placement.solver, "model": placement.model, "hardware": placement.hardware,
        "weight_dtype": placement.weight_dtype, "context": placement.context,
        "gpu_bytes": placement.gpu.as_dict(), "cpu_bytes": placement.cpu.as_dict(),
        "embed_device": placement.embed_device, "lm_head_device": placement.lm_head_device,
        "gpu_neurons_per_layer": placement.gpu_counts.tolist(),
        "stats": {"solve_time_s": placement.stats.solve_time_s,
                  "objective": placement.stats.objective, "gap": placement.stats.gap,
                  "status": placement.stats.status, "backend": placement.stats.backend,
                  **placement.stats.extra},
    }
    if profile is not None:
        out["metrics"] = placement.metrics(profile)
    return json.loads(json.dumps(out, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def plot_split(placement: Placement, profile: ActivationProfile, path: str | Path) -> Path:
    """Per-layer GPU share: of the neurons (top) and of the activations (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = placement.to_frame(profile)
    layers = frame["layer"].to_numpy()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 0.09 * len(layers) + 4), 5.5),
                                      sharex=True)
    # stacked steps over layers 0..L-1: one patch per series (a bar per layer would be
    # hundreds of patches, twice as slow to draw)
    edges = np.arange(len(layers) + 1) - 0.5
    share = frame["gpu_neuron_share"].to_numpy()
    top.stairs(share, edges, fill=True, color="tab:green", label="GPU")
    top.stairs(np.ones_like(share), edges, baseline=share, fill=True, color="tab:gray",
               alpha=0.5, label="CPU")
    attn = np.array([d == GPU for d in placement.attn_device])
    if attn.any():
        top.scatter(layers[attn], np.full(attn.sum(), 1.03), marker="|", color="tab:blue",
                    label="attention on GPU", clip_on=False)
    top.set_ylabel("share of neurons")
    top.set_ylim(0, 1.06)
    top.legend(loc="lower left", bbox_to_anchor=(0.0, 1.02), fontsize=7, ncol=3,
               frameon=False, borderaxespad=0.0)
    mass = frame["activation_mass"].to_numpy()
    gpu_mass = mass * frame["gpu_load_share"].to_numpy()
    bottom.stairs(gpu_mass, edges, fill=True, color="tab:green", label="GPU")
    bottom.stairs(mass, edges, baseline=gpu_mass, fill=True, color="tab:gray", alpha=0.5,
                  label="CPU")
    bottom.set_ylabel("active neurons / token")
    bottom.set_xlabel("layer")
    bottom.legend(loc="upper left", fontsize=7)
    metrics = placement.metrics(profile)
    fig.suptitle(f"{placement.solver}: {placement.model} ({placement.weight_dtype}) on "
                 f"{placement.hardware} - GPU neuron load "
                 f"{100 * metrics['gpu_neuron_load_share']:.1f}%", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_artifacts(placement: Placement, profile: ActivationProfile,
                    out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "layers_csv": placement.write_csv(out / "placement_layers.csv", profile),
        "summary_json": out / "placement.json",
        "split_png": plot_split(placement, profile, out / "placement_split.png"),
    }
    paths["summary_json"].write_text(json.dumps(summary(placement, profile), indent=1))
    return paths


def log_placement(placement: Placement, profile: ActivationProfile, out_dir: str | Path,
                  tracker: MetricsSink | None = None,
                  artifact_path: str = "placement") -> dict[str, float]:
    """Write the artifacts and log metrics + artifacts to `tracker` (or to the active
    MLflow run when there is one). Non-finite metrics (e.g. no gap) are skipped."""
    metrics = {k: v for k, v in placement.metrics(profile).items() if math.isfinite(v)}
    paths = write_artifacts(placement, profile, out_dir)
    if tracker is None:
        import mlflow

        if mlflow.active_run() is None:
            return metrics
        mlflow.log_metrics(metrics)
        for path in paths.values():
            mlflow.log_artifact(str(path), artifact_path)
        return metrics
    tracker.log_metrics(metrics)
    for path in paths.values():
        tracker.log_artifact(path, artifact_path)
    return metrics
