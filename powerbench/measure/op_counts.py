"""Operator counts of our engine: a torch dispatch mode records the aten operators one
decode step of a decoder issues per layer (structure, not time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from powerbench.simulator.config import (
    OpCounts,
)


class OpCounter(TorchDispatchMode):
    """Counts aten operators by region ("ffn", or "other")."""

    def __init__(self) -> None:
        super().__init__()
        self.region = "other"
        self.counts: dict[str, int] = {"ffn": 0, "other": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.counts[self.region] += 1
        return func(*args, **(kwargs or {}))


class _RegionFFN:
    def __init__(self, ffn: Any, counter: OpCounter) -> None:
        self.ffn, self.counter = ffn, counter

    def __call__(self, layer_idx: int, x: torch.Tensor, observer: Any = None) -> torch.Tensor:
        self.counter.region = "ffn"
        try:
            return self.ffn(layer_idx, x, observer)
        finally:
            self.counter.region = "other"


def _step_counts(decoder: Any, n_layers: int, prompt: torch.Tensor,
                 sample: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, int]:
    from powerbench.engine.decoder import Decoder

    weights = replace(decoder.w, layers=decoder.w.layers[:n_layers])
    sub = Decoder(weights, ffn=decoder.ffn, linear=decoder.linear,  # decoder's own kernels
                  fused=decoder.kernels is not None)
    counter = OpCounter()
    sub.ffn = _RegionFFN(decoder.ffn, counter)
    with torch.inference_mode():
        cache = sub.new_cache(prompt.shape[0], prompt.shape[1] + 2)
        logits = sub.forward(prompt, cache, last_only=True)[:, -1]
        token = sample(logits)
        with counter:
            logits = sub.forward(token[:, None], cache)[:, -1]
            sample(logits)
    return counter.counts


def count_ops(decoder: Any, prompt: torch.Tensor,
              sample: Callable[[torch.Tensor], torch.Tensor] | None = None,
              sparse: bool = False) -> OpCounts:
    """Operators per layer (attention + norms + residual adds; FFN incl. its predictor) and
    per token (embedding, final norm, output projection, token choice) of one decode step,
    from decoders with one and with all layers."""
    sample = sample or (lambda logits: logits.argmax(dim=-1))
    n = decoder.w.n_layers
    full = _step_counts(decoder, n, prompt, sample)
    one = _step_counts(decoder, 1, prompt, sample) if n > 1 else full
    per_layer_other = (full["other"] - one["other"]) / (n - 1) if n > 1 else 0.0
    ffn = full["ffn"] / n
    outside = one["other"] - per_layer_other
    return OpCounts(attention=round(per_layer_other), predictor=0,
                    ffn_dense=0 if sparse else round(ffn), ffn_sparse=round(ffn) if sparse else 0,
                    lm_head=max(round(outside), 0))
