"""Sparse-accuracy simulation on a Hugging Face model: FFN neurons outside the
predicted set are zeroed.

A forward pre-hook on each layer's FFN input module (fc1 / gate_proj) keeps x; a
forward pre-hook on the output module (fc2 / down_proj) multiplies its input h by the
predicted mask `predictors.predict_mask(layer, x)` (per token). For ReLU-family FFNs
this is exactly what a sparse kernel that computes only the predicted neurons returns
(an unpredicted neuron contributes nothing; a predicted inactive one contributes 0),
so perplexity and accuracy equal those of sparse inference with the same predictor.
With the oracle the masks equal h != 0 and the logits equal the dense ones.

The hooks also count, against the true activations (h != 0), how many neurons were
active, predicted and both: end-to-end recall on the evaluated text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from powerbench.evaluation.perplexity import LogitsFn, hf_logits_fn
from powerbench.predictor.hf_ffn import ffn_modules
from powerbench.predictor.predictor_set import ActivePredictor


@dataclass
class MaskCounts:
    """Per-layer (true active, predicted, both, total) counts over masked forwards."""

    positives: list[int] = field(default_factory=list)
    predicted: list[int] = field(default_factory=list)
    tp: list[int] = field(default_factory=list)
    total: list[int] = field(default_factory=list)

    def _ensure(self, n_layers: int) -> None:
        for counts in (self.positives, self.predicted, self.tp, self.total):
            counts.extend([0] * (n_layers - len(counts)))

    def add(self, layer: int, active: Tensor, predicted: Tensor) -> None:
        self._ensure(layer + 1)
        self.positives[layer] += int(active.sum())
        self.predicted[layer] += int(predicted.sum())
        self.tp[layer] += int((active & predicted).sum())
        self.total[layer] += active.numel()

    @property
    def recall(self) -> float:
        return sum(self.tp) / max(sum(self.positives), 1)

    @property
    def precision(self) -> float:
        return sum(self.tp) / max(sum(self.predicted), 1)

    @property
    def predicted_active_fraction(self) -> float:
        return sum(self.predicted) / max(sum(self.total), 1)

    @property
    def true_active_fraction(self) -> float:
        return sum(self.positives) / max(sum(self.total), 1)


@contextmanager
def ffn_masking(model: nn.Module, predictors: ActivePredictor,
                counts: MaskCounts | None = None) -> Iterator[MaskCounts]:
    """Within the block, `model`'s FFNs compute only the neurons `predictors` choose."""
    counts = counts if counts is not None else MaskCounts()
    layers = ffn_modules(model)
    if len(layers) != predictors.shape.n_layers:
        raise ValueError(f"model has {len(layers)} FFN layers, predictors are for "
                         f"{predictors.shape}")
    inputs: dict[int, Tensor] = {}
    handles = []

    def keep_input(layer: int):
        def hook(_module, args):
            inputs[layer] = args[0]

        return hook

    def mask_output(layer: int):
        def hook(_module, args):
            h = args[0]
            x = inputs.pop(layer)
            predicted = predictors.predict_mask(layer, x.reshape(-1, x.shape[-1]))
            predicted = predicted.reshape(h.shape)
            counts.add(layer, h != 0, predicted)
            return (h * predicted.to(h.dtype),) + tuple(args[1:])

        return hook

    try:
        for i, ffn in enumerate(layers):
            handles.append(ffn.input.register_forward_pre_hook(keep_input(i)))
            handles.append(ffn.output.register_forward_pre_hook(mask_output(i)))
        yield counts
    finally:
        for handle in handles:
            handle.remove()


class MaskedLogits:
    """LogitsFn of `model` with FFNs restricted to `predictors` (dense when None)."""

    def __init__(self, model: nn.Module, predictors: ActivePredictor | None) -> None:
        self.model, self.predictors = model, predictors
        self.counts = MaskCounts()
        self._dense = hf_logits_fn(model)

    @torch.inference_mode()
    def __call__(self, ids: Tensor) -> Tensor:
        if self.predictors is None:
            return self._dense(ids)
        with ffn_masking(self.model, self.predictors, self.counts):
            return self._dense(ids)


def masked_logits_fn(model: nn.Module, predictors: ActivePredictor | None) -> LogitsFn:
    """[batch, seq] ids -> logits with non-predicted FFN neurons zeroed (`.counts` kept)."""
    return MaskedLogits(model, predictors)
