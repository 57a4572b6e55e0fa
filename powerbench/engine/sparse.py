"""The decoder FFN for engine=sparse_torch | sparse_cpu | sparse_cuda.

Per layer and decode step, the predictors choose the active neurons (the union over the
batch's tokens) and a neuron-aware operator backend (`powerbench.ops`) computes only
those: each active neuron's fc1 row and fc2 column are read as contiguous vectors, the
rest of the FFN's weights are never touched. With `predictor=oracle` the active set is
the true one (from the layer's own fc1, computed densely): the accuracy bound, whose speed
includes that dense fc1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from powerbench.engine.ffn import FFNObserver
from powerbench.engine.weights import DecoderWeights, GatedFFNWeights, ReluFFNWeights
from powerbench.ops import get_backend


def _fp32(bias: Tensor | None) -> Tensor | None:
    return None if bias is None else bias.float().contiguous()


class SparseFFN:
    def __init__(self, weights: DecoderWeights, backend: str = "sparse_cpu",
                 predictors: Any = None, check: bool = False, loaded: Any = None) -> None:
        if predictors is None:
            raise ValueError(f"engine={backend} computes the neurons a predictor chooses: run it "
                             "with predictor=fixed, adaptive or oracle (predictor=none is the "
                             "dense baseline, engine=dense)")
        if loaded is not None:
            predictors.check_compatible(loaded.spec)  # predictors for another shape: refused
        self.ops = get_backend(backend)  # falls back (one warning) if it cannot be built
        self.backend = self.ops.name
        self.predictors = predictors
        self.check = check
        self.layers = [self._prepare(layer.ffn) for layer in weights.layers]
        self.d_ffn = weights.layers[0].ffn.d_ffn
        self.active_sum = 0
        self.calls = 0

    @staticmethod
    def _prepare(f: ReluFFNWeights | GatedFFNWeights):
        if isinstance(f, GatedFFNWeights):
            if any(b is not None for b in (f.b_gate, f.b_up, f.b_down)):
                raise ValueError("sparse gated FFNs have no biases; this model has some")
            return f
        return ReluFFNWeights(w1=f.w1.contiguous(), b1=_fp32(f.b1), w2=f.w2,
                              w2_t=f.w2_t.contiguous(), b2=_fp32(f.b2), kind=f.kind)

    def __call__(self, layer_idx: int, x: Tensor, observer: FFNObserver | None = None) -> Tensor:
        idx = self.predictors.predict(layer_idx, x)
        f = self.layers[layer_idx]
        if isinstance(f, GatedFFNWeights):
            y = self.ops.ffn_gated(x, f.w_gate, f.w_up, f.w_down_t, idx, f.kind.value,
                                   check=self.check)
        else:
            y = self.ops.ffn_relu(x, f.w1, f.b1, f.w2_t, f.b2, idx, check=self.check)
        self.active_sum += int(idx.numel())
        self.calls += 1
        if observer is not None:
            mask = torch.zeros(x.shape[0], self.d_ffn, dtype=torch.bool)
            mask[:, idx.long()] = True
            observer.record(layer_idx, x, mask)
        return y

    def metrics(self) -> dict[str, float]:
        """Mean share of FFN neurons computed per layer call (union over the batch)."""
        if not self.calls:
            return {}
        return {"sparse_computed_fraction": self.active_sum / (self.calls * self.d_ffn)}
