"""Measured activation profiles: forward hooks on every FFN of a real model.

For each decoder layer, hooks on the FFN's probe Linear layers (see `adapters`) read the
FFN input hidden state and the pre-activations, turn them into a bool active mask per
token, and accumulate: per-neuron counts (int64), the per-token active fraction of every
profiled token (float32), `samples_per_layer` (hidden fp16, mask) pairs at the SAME
token positions in every layer (seeded uniform choice without replacement, sorted), and
the masks of the first `trace_tokens` consecutive tokens (bit-packed). Hooks are always
removed, also when the forward pass fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from powerbench.config.schema import ProfilingConfig
from powerbench.model.loading import LoadedModel
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile, pack_masks
from powerbench.profiling.adapters import (
    ACTIVE_DEFINITIONS,
    active_rule,
    active_test,
    adapter_for,
)
from powerbench.profiling.tokens import batches, profiling_sequences
from powerbench.progress import Progress

# Bump when what the profiler records changes: it is part of every cache key.
PROFILER_VERSION = 1


class _LayerRecorder:
    """Accumulates one layer's statistics from its probes' forward hooks."""

    def __init__(self, index: int, rule: tuple[str, ...], n_tokens: int,
                 sample_positions: np.ndarray, trace_tokens: int,
                 test: Callable[[torch.Tensor], torch.Tensor] = lambda out: out > 0) -> None:
        self.index, self.rule, self.test = index, rule, test
        self.n_tokens = n_tokens
        self.positions = sample_positions
        self.trace_tokens = min(trace_tokens, n_tokens)
        self.offset = 0  # global index of the current batch's first token
        self.pending: dict[str, torch.Tensor] = {}
        self.hidden_in: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None
        self.token_active = np.zeros(n_tokens, dtype=np.float32)
        self.hidden: np.ndarray | None = None
        self.masks: np.ndarray | None = None
        self.trace: np.ndarray | None = None

    def hook(self, role: str):
        def on_forward(_module: Any, inputs: tuple, output: torch.Tensor) -> None:
            self.pending[role] = self.test(output)
            if self.hidden_in is None:
                self.hidden_in = inputs[0]
            if all(r in self.pending for r in self.rule):
                self._record()
        return on_forward

    def _allocate(self, n_neurons: int, d_model: int, device: torch.device) -> None:
        self.counts = torch.zeros(n_neurons, dtype=torch.int64, device=device)
        self.hidden = np.zeros((self.positions.size, d_model), dtype=np.float16)
        self.masks = np.zeros((self.positions.size, n_neurons), dtype=bool)
        self.trace = np.zeros((self.trace_tokens, n_neurons), dtype=bool)

    def _record(self) -> None:
        mask = self.pending[self.rule[0]]
        for role in self.rule[1:]:
            mask = mask & self.pending[role]
        hidden = self.hidden_in
        self.pending.clear()
        self.hidden_in = None
        assert hidden is not None
        n_neurons = mask.shape[-1]
        mask = mask.reshape(-1, n_neurons)
        hidden = hidden.reshape(-1, hidden.shape[-1])
        if self.counts is None:
            self._allocate(n_neurons, hidden.shape[-1], mask.device)
        assert self.counts is not None and self.masks is not None
        assert self.hidden is not None and self.trace is not None
        lo, n = self.offset, mask.shape[0]
        if lo + n > self.n_tokens:
            raise RuntimeError(f"layer {self.index}: more tokens than planned "
                               f"({lo + n} > {self.n_tokens}); was the FFN called twice?")
        # Sums as float32 matrix-vector products: exact (< 2^24 per batch) and several
        # times faster than reducing bool tensors.
        maskf = mask.to(torch.float32)
        ones_t = torch.ones(1, n, device=mask.device)
        ones_n = torch.full((n_neurons, 1), 1.0 / n_neurons, device=mask.device)
        self.counts += (ones_t @ maskf)[0].round().to(torch.int64)
        self.token_active[lo:lo + n] = (maskf @ ones_n)[:, 0].cpu().numpy()
        s_lo, s_hi = np.searchsorted(self.positions, [lo, lo + n])
        if s_hi > s_lo:
            rows = torch.as_tensor(self.positions[s_lo:s_hi] - lo, device=mask.device)
            self.hidden[s_lo:s_hi] = hidden[rows].to(torch.float16).cpu().numpy()
            self.masks[s_lo:s_hi] = mask[rows].cpu().numpy()
        if lo < self.trace_tokens:
            stop = min(self.trace_tokens, lo + n)
            self.trace[lo:stop] = mask[:stop - lo].cpu().numpy()

    def result(self) -> LayerProfile:
        if self.counts is None:
            raise RuntimeError(f"layer {self.index}: FFN hooks never fired")
        assert self.trace is not None
        return LayerProfile(
            index=self.index, counts=self.counts.cpu().numpy().astype(np.int64),
            n_tokens=self.n_tokens, token_active=self.token_active,
            hidden=self.hidden, masks=self.masks, trace=pack_masks(self.trace))


def profile_model(loaded: LoadedModel, texts: list[str], cfg: ProfilingConfig, dataset: str,
                  seed: int = 0, progress: bool = True) -> ActivationProfile:
    """Profile a real model's FFN activations on `texts` (see module doc)."""
    if not loaded.has_weights or loaded.tokenizer is None:
        raise ValueError(f"{loaded.spec.name}: a measured profile needs weights and a "
                         "tokenizer; use powerbench.profiling.synthetic_profile for shape-only "
                         "models")
    model = loaded.model
    rule = active_rule(loaded.spec.ffn_kind)
    adapter = adapter_for(model)
    body = adapter.body(model)
    decoder_layers = list(adapter.layers(body))

    sequences = profiling_sequences(loaded.tokenizer, texts, cfg.seq_len, cfg.max_tokens)
    n_tokens = sum(len(s) for s in sequences)
    rng = np.random.default_rng(seed)
    n_samples = min(cfg.samples_per_layer, n_tokens)
    positions = np.sort(rng.choice(n_tokens, size=n_samples, replace=False)).astype(np.int64)
    test = active_test(loaded.spec.ffn_kind)
    recorders = [_LayerRecorder(i, rule, n_tokens, positions, cfg.trace_tokens, test)
                 for i in range(len(decoder_layers))]

    device = next(model.parameters()).device
    was_training = model.training
    handles = []
    try:
        for layer, recorder in zip(decoder_layers, recorders, strict=True):
            probes = adapter.probes(layer)
            for role in rule:
                handles.append(probes[role].register_forward_hook(recorder.hook(role)))
        model.eval()
        offset = 0
        with torch.inference_mode():
            all_batches = list(batches(sequences, cfg.batch_size))
            for batch in (Progress.iter(all_batches, f"profiling {loaded.spec.name} (batches)")
                          if progress else all_batches):
                for recorder in recorders:
                    recorder.offset = offset
                body(input_ids=torch.tensor(batch, device=device), use_cache=False)
                offset += len(batch) * len(batch[0])
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)

    return ActivationProfile(
        model=loaded.spec.name, source="measured", dataset=dataset, n_tokens=n_tokens,
        layers=[r.result() for r in recorders], sample_positions=positions,
        meta={
            "seq_len": cfg.seq_len, "max_tokens": cfg.max_tokens,
            "samples_per_layer": cfg.samples_per_layer, "trace_tokens": cfg.trace_tokens,
            "batch_size": cfg.batch_size, "seed": seed, "n_sequences": len(sequences),
            "ffn_kind": loaded.spec.ffn_kind.value,
            "active_definition": ACTIVE_DEFINITIONS[loaded.spec.ffn_kind],
            "weights_hash": loaded.weights_hash, "profiler_version": PROFILER_VERSION,
            "model_source": loaded.source,
        },
    )
