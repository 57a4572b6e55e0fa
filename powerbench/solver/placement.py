"""The Placement: which neurons and which dense parts live on which device.

Devices are roles: "gpu" is the hardware profile's accelerator (a GPU, or an NPU on a
phone), "cpu" its host. Neuron ids index `ActivationProfile.layers[l].counts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.schema_helpers import UserError

Device = Literal["gpu", "cpu"]
GPU: Device = "gpu"
CPU: Device = "cpu"


class PlacementInfeasibleError(UserError, RuntimeError):
    """A model does not fit a budget. `budget` names it: "GPU", "CPU" or "GPU+CPU"."""

    def __init__(self, budget: str, required_bytes: float, available_bytes: float,
                 detail: str = "") -> None:
        self.budget = budget
        self.required_bytes = float(required_bytes)
        self.available_bytes = float(available_bytes)
        self.shortfall_bytes = self.required_bytes - self.available_bytes
        msg = (f"{budget} budget short by {self.shortfall_bytes / 1e9:.2f} GB "
               f"({self.shortfall_bytes:.0f} bytes): needs {self.required_bytes / 1e9:.2f} GB, "
               f"has {self.available_bytes / 1e9:.2f} GB")
        super().__init__(f"{msg}. {detail}".strip() if detail else msg)


@dataclass
class DeviceBytes:
    """Bytes resident on one device, by kind."""

    ffn: float = 0.0
    attention: float = 0.0
    embeddings: float = 0.0  # input embedding and/or output projection
    kv_cache: float = 0.0
    predictors: float = 0.0
    buffers: float = 0.0

    @property
    def weights(self) -> float:
        """Model parameters (FFN + attention + embeddings)."""
        return self.ffn + self.attention + self.embeddings

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, float]:
        out = {f.name: float(getattr(self, f.name)) for f in fields(self)}
        out.update(weights=self.weights, total=self.total)
        return out


@dataclass
class SolverStats:
    solve_time_s: float = 0.0
    objective: float | None = None  # sum of GPU neuron activation frequencies (per token)
    gap: float | None = None  # relative MIP gap reported by the backend (0: exact solver)
    status: str = "optimal"
    backend: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class Placement:
    solver: str
    model: str
    hardware: str
    weight_dtype: str
    context: int
    neurons_per_layer: int
    gpu_neurons: list[np.ndarray]  # per layer: sorted int ids of GPU-resident neurons
    attn_device: list[Device]  # per layer; the layer's KV cache lives with its attention
    kv_device: list[Device]
    predictor_device: list[Device | None]  # None: no predictor (dense execution)
    embed_device: Device
    lm_head_device: Device
    min_gpu_neurons: np.ndarray  # C_l per layer (0 where no communication term)
    gpu: DeviceBytes
    cpu: DeviceBytes
    stats: SolverStats = field(default_factory=SolverStats)

    # ---- structure -----------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.gpu_neurons)

    @property
    def gpu_counts(self) -> np.ndarray:
        return np.array([ids.size for ids in self.gpu_neurons], dtype=np.int64)

    def gpu_mask(self, layer: int) -> np.ndarray:
        mask = np.zeros(self.neurons_per_layer, dtype=bool)
        mask[self.gpu_neurons[layer]] = True
        return mask

    @property
    def gpu_layers(self) -> int:
        """Layers entirely on the accelerator (attention and every FFN neuron)."""
        counts = self.gpu_counts
        return int(sum(1 for c, a in zip(counts, self.attn_device, strict=True)
                       if a == GPU and c == self.neurons_per_layer))

    @property
    def cl_violations(self) -> int:
        """Layers whose GPU share lies strictly between 0 and C_l neurons."""
        counts = self.gpu_counts
        return int(np.sum((counts > 0) & (counts < self.min_gpu_neurons)))

    def device_bytes(self, device: Device) -> DeviceBytes:
        return self.gpu if device == GPU else self.cpu

    # ---- metrics -------------------------------------------------------------------------
    def layer_load(self, profile: ActivationProfile) -> tuple[np.ndarray, np.ndarray]:
        """(GPU, total) activation mass per layer: sums of neuron frequencies."""
        gpu = np.array([float(layer.frequency[ids].sum())
                        for layer, ids in zip(profile.layers, self.gpu_neurons, strict=True)])
        total = np.array([float(layer.frequency.sum()) for layer in profile.layers])
        return gpu, total

    def metrics(self, profile: ActivationProfile) -> dict[str, float]:
        """The placement metrics logged to MLflow (names documented in the README table)."""
        gpu, total = self.layer_load(profile)
        counts = self.gpu_counts
        out = {
            "gpu_neuron_load_share": float(gpu.sum() / total.sum()) if total.sum() > 0 else 0.0,
            "gpu_neuron_share": float(counts.sum() / (self.n_layers * self.neurons_per_layer)),
            "gpu_weight_bytes": float(self.gpu.weights),
            "cpu_weight_bytes": float(self.cpu.weights),
            "gpu_total_bytes": float(self.gpu.total),
            "cpu_total_bytes": float(self.cpu.total),
            "gpu_ffn_bytes": float(self.gpu.ffn),
            "gpu_layers": float(self.gpu_layers),
            "gpu_attention_layers": float(sum(a == GPU for a in self.attn_device)),
            "cl_violations": float(self.cl_violations),
            "solve_time_s": float(self.stats.solve_time_s),
        }
        if self.stats.gap is not None:  # unknown when a backend reports none
            out["solver_gap"] = float(self.stats.gap)
        if self.stats.objective is not None:
            out["solver_objective"] = float(self.stats.objective)
        return out

    def to_frame(self, profile: ActivationProfile | None = None) -> pd.DataFrame:
        """One row per layer: the GPU/CPU split and where the dense parts live."""
        counts = self.gpu_counts
        frame = pd.DataFrame({
            "layer": np.arange(self.n_layers),
            "neurons": self.neurons_per_layer,
            "gpu_neurons": counts,
            "gpu_neuron_share": counts / self.neurons_per_layer,
            "min_gpu_neurons": self.min_gpu_neurons,
            "attn_device": self.attn_device,
            "kv_device": self.kv_device,
            "predictor_device": [d or "none" for d in self.predictor_device],
        })
        if profile is not None:
            gpu, total = self.layer_load(profile)
            frame["activation_mass"] = total
            frame["gpu_load_share"] = np.divide(gpu, total, out=np.zeros_like(gpu),
                                                where=total > 0)
        return frame

    def write_artifacts(self, out_dir: str | Path, profile: ActivationProfile) -> list[Path]:
        """Per-layer CSV, JSON summary and split plot under `out_dir` (see report.py)."""
        from powerbench.solver.report import write_artifacts

        return list(write_artifacts(self, profile, out_dir).values())

    def write_csv(self, path: str | Path, profile: ActivationProfile | None = None) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.to_frame(profile).to_csv(path, index=False)
        return path
