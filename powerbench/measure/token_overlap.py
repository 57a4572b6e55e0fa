"""Measure the token-to-token overlap of active neurons on a real model.

Runs the model over consecutive profiling sequences (powerbench.profiling.tokens), reads
each FFN's probe outputs with forward hooks and turns them into per-token active masks:

- ReLU-family FFNs: the profiler's own rule (powerbench.profiling.adapters: every probe of
  the kind's rule > 0);
- SwiGLU FFNs (SiLU has no exact zeros): the CATS rule of predictor=threshold
  (powerbench.predictor.gate_threshold): neuron kept iff |silu(gate(x))| > t_l, with t_l
  the `target_sparsity` quantile of layer l's magnitudes over the traced tokens.

The masks go to powerbench.profiling.token_overlap.measure_overlap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from powerbench.model.spec import FFNKind
from powerbench.predictor.gate_threshold import GATE_ACTIVATIONS, fit_threshold
from powerbench.profiling.adapters import active_rule, adapter_for
from powerbench.profiling.token_overlap import OverlapStats, measure_overlap
from powerbench.profiling.tokens import profiling_sequences


def traced_masks(loaded: Any, texts: list[str], tokens: int, seq_len: int,
                 target_sparsity: float = 0.5) -> list[np.ndarray]:
    """Per layer, bool [tokens, neurons] masks of `tokens` consecutive profiled tokens."""
    kind = FFNKind(loaded.spec.ffn_kind)
    rule = active_rule(kind)
    adapter = adapter_for(loaded.model)
    body = adapter.body(loaded.model)
    layers = list(adapter.layers(body))
    sequences = profiling_sequences(loaded.tokenizer, texts, seq_len, tokens)
    outputs: list[dict[str, list[torch.Tensor]]] = [{r: [] for r in rule} for _ in layers]
    handles = []

    def keep(store: list[torch.Tensor]):
        def hook(_module: Any, _inputs: Any, out: torch.Tensor) -> None:
            store.append(out.detach().reshape(-1, out.shape[-1]).float())
        return hook

    try:
        for layer, store in zip(layers, outputs, strict=True):
            probes = adapter.probes(layer)
            for role in rule:
                handles.append(probes[role].register_forward_hook(keep(store[role])))
        with torch.inference_mode():
            for seq in sequences:
                body(input_ids=torch.tensor([seq]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    masks = []
    for store in outputs:
        probe = {r: torch.cat(store[r]) for r in rule}
        if kind is FFNKind.swiglu:
            magnitude = GATE_ACTIVATIONS["swiglu"](probe["gate"]).abs()
            mask = magnitude > fit_threshold(magnitude, target_sparsity)
        else:
            mask = torch.stack([probe[r] > 0 for r in rule]).all(dim=0)
        masks.append(mask.numpy())
    return masks


def model_overlap(loaded: Any, texts: list[str], tokens: int, seq_len: int,
                  target_sparsity: float = 0.5) -> OverlapStats:
    """OverlapStats of `loaded` on `tokens` consecutive tokens of `texts`."""
    masks = traced_masks(loaded, texts, tokens, seq_len, target_sparsity)
    label = loaded.spec.name
    if FFNKind(loaded.spec.ffn_kind) is FFNKind.swiglu:
        label = f"{label} (CATS {target_sparsity:g})"
    return measure_overlap(label, masks, seq_len)
