"""Predictor sets: one active-neuron predictor per FFN layer, tied to a model shape.

The engine and the evaluation call only the `ActivePredictor` protocol:

    predict_mask(layer_idx, x[batch, d_model]) -> bool [batch, neurons]   (per row)
    predict(layer_idx, x[batch, d_model])      -> int64 [k] sorted neuron ids, the union
                                                  over the batch (what a sparse kernel
                                                  computes for the whole batch)

`PredictorSet` holds trained `LayerPredictor`s (saved and loaded with torch, weights
only); `OraclePredictorSet` (powerbench.predictor.oracle) computes the true mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from powerbench.predictor.model import LayerPredictor
from powerbench.predictor.stats import LayerPredictorStats, overall_metrics

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ModelShape:
    """What a predictor set is tied to."""

    name: str
    n_layers: int
    d_model: int
    neurons: int  # FFN neurons per layer

    @classmethod
    def of(cls, spec: Any) -> ModelShape:
        """From a ModelSpec (or anything with name, n_layers, d_model, neurons_per_layer)."""
        if isinstance(spec, ModelShape):
            return spec
        return cls(spec.name, spec.n_layers, spec.d_model, spec.neurons_per_layer)

    def __str__(self) -> str:
        return (f"{self.name!r} (n_layers={self.n_layers}, d_model={self.d_model}, "
                f"neurons={self.neurons})")


@runtime_checkable
class ActivePredictor(Protocol):
    shape: ModelShape
    strategy: str
    idealised: bool

    def predict_mask(self, layer_idx: int, x: Tensor) -> Tensor: ...

    def predict(self, layer_idx: int, x: Tensor) -> Tensor: ...

    def check_compatible(self, spec: Any) -> None: ...

    def metrics(self, spec: Any, profile: Any) -> dict[str, float]: ...


def mean_active_fraction(profile: Any) -> float:
    """Mean over layers of the profile's per-token active fraction."""
    layers = profile.layers
    return float(sum(layer.active_fraction for layer in layers) / max(len(layers), 1))


class PredictorBase:
    """Shape checks and `predict` (the batch union) on top of a per-row `_mask`."""

    shape: ModelShape
    strategy: str
    # True when knowing the set is assumed free (oracle): an engine should then not count
    # the time `predict` takes against the run's speed.
    idealised: bool = False

    def _mask(self, layer_idx: int, x: Tensor) -> Tensor:
        raise NotImplementedError

    def check_compatible(self, spec: Any) -> None:
        """Raise ValueError naming both shapes when `spec` is not the shape this was built for."""
        other = ModelShape.of(spec)
        if other != self.shape:
            raise ValueError(
                f"{self.strategy} predictors were built for model {self.shape} and cannot "
                f"be used with model {other}; rebuild them for this model")

    def _check_input(self, layer_idx: int, x: Tensor) -> Tensor:
        if not 0 <= layer_idx < self.shape.n_layers:
            raise IndexError(f"layer {layer_idx} out of range for model {self.shape}")
        if x.shape[-1] != self.shape.d_model:
            raise ValueError(f"predictor input has width {x.shape[-1]} but model "
                             f"{self.shape} has d_model={self.shape.d_model}")
        return x.reshape(-1, self.shape.d_model)

    def predict_mask(self, layer_idx: int, x: Tensor) -> Tensor:
        """bool [batch, neurons]: the neurons predicted active for each row of x."""
        return self._mask(layer_idx, self._check_input(layer_idx, x))

    def predict(self, layer_idx: int, x: Tensor) -> Tensor:
        """int64 sorted ids of neurons predicted active for any row of x."""
        union = self.predict_mask(layer_idx, x).any(dim=0)
        return torch.nonzero(union, as_tuple=False).flatten()


class PredictorSet(PredictorBase):
    """Trained predictors, one per layer, with their statistics and build info."""

    def __init__(self, shape: ModelShape, predictors: Sequence[LayerPredictor],
                 stats: Sequence[LayerPredictorStats], strategy: str,
                 info: dict | None = None) -> None:
        if len(predictors) != shape.n_layers:
            raise ValueError(f"{len(predictors)} predictors for model {shape}")
        for i, p in enumerate(predictors):
            if (p.d_model, p.n_neurons) != (shape.d_model, shape.neurons):
                raise ValueError(f"layer {i} predictor maps {p.d_model} -> {p.n_neurons}, "
                                 f"model {shape} needs {shape.d_model} -> {shape.neurons}")
        self.shape = shape
        self.predictors = list(predictors)
        self.stats = list(stats)
        self.strategy = strategy
        self.info = dict(info or {})

    def _mask(self, layer_idx: int, x: Tensor) -> Tensor:
        return self.predictors[layer_idx].predict_mask(x)

    def fused_weights(self, layer_idx: int):
        """Layer `layer_idx`'s predictor for `SparseOps.ffn_predicted` (one fused call)."""
        return self.predictors[layer_idx].fused_weights()

    def to(self, device: torch.device | str | None = None,
           dtype: torch.dtype | None = None) -> PredictorSet:
        """Move (in place) every layer's predictor, e.g. next to the engine's weights."""
        for p in self.predictors:
            p.to(device=device, dtype=dtype)
        return self

    @property
    def ranks(self) -> list[int]:
        return [p.rank for p in self.predictors]

    @property
    def thresholds(self) -> list[float]:
        return [float(p.threshold) for p in self.predictors]

    @property
    def param_count(self) -> int:
        return sum(p.param_count for p in self.predictors)

    def metrics(self, spec: Any, profile: Any = None) -> dict[str, float]:
        """Overall metrics (pooled test-split counts) plus build information."""
        metrics = overall_metrics(self.stats, spec.total_params)
        info = self.info
        metrics["predictor_target_recall"] = float(info.get("target_recall", float("nan")))
        metrics["predictor_build_s"] = float(info.get("build_s", 0.0))
        metrics["predictor_train_s_total"] = float(info.get("train_s_total", 0.0))
        metrics["predictor_cache_hit"] = float(bool(info.get("cache_hit", False)))
        if "converged" in info:
            metrics["predictor_converged"] = float(info["converged"])
            metrics["predictor_ppl_rounds"] = float(len(info.get("history", [])))
        return metrics

    # ---- persistence --------------------------------------------------------------------
    def to_state(self) -> dict:
        return {
            "format": FORMAT_VERSION,
            "shape": asdict(self.shape),
            "strategy": self.strategy,
            "layers": [{"config": p.describe(), "state": p.state_dict()}
                       for p in self.predictors],
            "stats": [s.to_dict() for s in self.stats],
            "info": self.info,
        }

    @classmethod
    def from_state(cls, state: dict, expect: Any | None = None) -> PredictorSet:
        if state.get("format") != FORMAT_VERSION:
            raise ValueError(f"predictor file format {state.get('format')!r}, "
                             f"expected {FORMAT_VERSION}")
        shape = ModelShape(**state["shape"])
        if expect is not None and ModelShape.of(expect) != shape:
            raise ValueError(
                f"{state['strategy']} predictors were built for model {shape} and cannot be "
                f"used with model {ModelShape.of(expect)}; rebuild them for this model")
        predictors = []
        for layer in state["layers"]:
            p = LayerPredictor(**layer["config"])
            p.load_state_dict(layer["state"])
            p.eval().requires_grad_(False)
            predictors.append(p)
        stats = [LayerPredictorStats(**s) for s in state["stats"]]
        return cls(shape, predictors, stats, state["strategy"], state["info"])

    def save(self, path: Path) -> None:
        torch.save(self.to_state(), path)

    @classmethod
    def load(cls, path: Path, expect: Any | None = None) -> PredictorSet:
        """Load; with `expect` (a ModelSpec/ModelShape) refuse any other model shape."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        return cls.from_state(state, expect)
