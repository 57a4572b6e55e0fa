"""FFN observers: what a run records about its FFN activations (see `ffn.FFNObserver`)."""

from __future__ import annotations

import torch
from torch import Tensor


class ActivationRecorder:
    """Per layer: how often each neuron was active, and each token's active fraction.

    For dense runs `active` is "activation != 0"; for sparse runs it is the set of
    neurons the FFN computed, so `counts` are the active-neuron counts of the run.
    `keep_inputs=True` also keeps the FFN inputs (on CPU) for predictor training.
    """

    def __init__(self, n_layers: int, keep_inputs: bool = False) -> None:
        self.n_layers = n_layers
        self.keep_inputs = keep_inputs
        self.counts: list[Tensor | None] = [None] * n_layers
        self.n_tokens = [0] * n_layers
        self._token_active: list[list[Tensor]] = [[] for _ in range(n_layers)]
        self._inputs: list[list[Tensor]] = [[] for _ in range(n_layers)]

    def record(self, layer_idx: int, x: Tensor, active: Tensor) -> None:
        per_neuron = active.sum(0, dtype=torch.long).cpu()
        prev = self.counts[layer_idx]
        self.counts[layer_idx] = per_neuron if prev is None else prev + per_neuron
        self.n_tokens[layer_idx] += active.shape[0]
        self._token_active[layer_idx].append(active.float().mean(1).cpu())
        if self.keep_inputs:
            self._inputs[layer_idx].append(x.detach().float().cpu())

    def token_active(self, layer_idx: int) -> Tensor:
        """Active fraction of the layer's neurons, one entry per recorded token."""
        parts = self._token_active[layer_idx]
        return torch.cat(parts) if parts else torch.zeros(0)

    def inputs(self, layer_idx: int) -> Tensor:
        if not self.keep_inputs:
            raise RuntimeError("ActivationRecorder(keep_inputs=False) keeps no inputs")
        parts = self._inputs[layer_idx]
        return torch.cat(parts) if parts else torch.zeros(0)

    def mean_active_fraction(self) -> float:
        """Mean over layers and tokens of the active share of neurons."""
        parts = [self.token_active(i) for i in range(self.n_layers) if self.n_tokens[i]]
        return float(torch.cat(parts).mean()) if parts else 0.0
