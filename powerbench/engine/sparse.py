"""The decoder FFN for engine=sparse_torch | sparse_cpu | sparse_cuda.

Per layer and decode step, the predictors choose the active neurons (the union over the
batch's tokens) and a neuron-aware operator backend (`powerbench.ops`) computes only
those: each active neuron's fc1 row and fc2 column are read as contiguous vectors, the
rest of the FFN's weights are never touched. Trained predictors run inside the same
operator call (`SparseOps.ffn_predicted`: one dispatch per layer on sparse_cpu, where the
predictor, the threshold and the FFN are one C++ call); `fused=False` runs the predictor
in torch first, then the operator. Threshold (CATS) predictors (`gate_thresholds`) run as
`SparseOps.prepare_ffn_gate_threshold`: the gate densely, then only the up rows and down
columns of the neurons whose |act(gate)| passes the layer's threshold, per token. With
`predictor=oracle` the active set is
the true one (from the layer's own fc1, computed densely): the accuracy bound. Its sets
are recorded during the first generation (the engine's warm-up) and replayed on later
ones (`rewind()`, `powerbench.predictor.replay`), so timed oracle runs pay for the sparse
operators alone: the speed bound. Calls of at least `dense_from_rows` rows (a prompt) run
the dense FFN: their union covers nearly every neuron, where a GEMM is faster.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from powerbench.engine.ffn import DenseFFN, FFNObserver
from powerbench.engine.linear import LinearFn
from powerbench.engine.weights import DecoderWeights, GatedFFNWeights, ReluFFNWeights
from powerbench.ops import get_backend
from powerbench.ops import weights as ops_weights
from powerbench.predictor.replay import ReplayedActiveSets


def _fp32(bias: Tensor | None) -> Tensor | None:
    return None if bias is None else bias.float().contiguous()


def operator_weights(f: ReluFFNWeights | GatedFFNWeights) -> ops_weights.ReluFFNWeights | \
        ops_weights.GatedFFNWeights:
    """A decoder layer's FFN in the operators' layout (neuron-major, fp32 biases)."""
    if isinstance(f, GatedFFNWeights):
        if any(b is not None for b in (f.b_gate, f.b_up, f.b_down)):
            raise ValueError("sparse gated FFNs have no biases; this model has some")
        f.gate_up()  # gate/up as row views of the stacked matrix the dense decoder reads
        return ops_weights.GatedFFNWeights(w_gate=f.w_gate.contiguous(), w_up=f.w_up.contiguous(),
                                           w_down_t=f.w_down_t.contiguous(), kind=f.kind.value)
    return ops_weights.ReluFFNWeights(w1=f.w1.contiguous(), b1=_fp32(f.b1),
                                      w2_t=f.w2_t.contiguous(), b2=_fp32(f.b2))


class SparseFFN:
    def __init__(self, weights: DecoderWeights, backend: str = "sparse_cpu",
                 predictors: Any = None, check: bool = False, fused: bool = True,
                 dense_from_rows: int = 32, loaded: Any = None,
                 linear: LinearFn | None = None) -> None:
        if predictors is None:
            raise ValueError(f"engine={backend} computes the neurons a predictor chooses: run it "
                             "with predictor=fixed, adaptive or oracle (predictor=none is the "
                             "dense baseline, engine=dense)")
        if loaded is not None:
            predictors.check_compatible(loaded.spec)  # predictors for another shape: refused
        self.ops = get_backend(backend)  # falls back (one warning) if it cannot be built
        self.backend = self.ops.name
        move = getattr(predictors, "to", None)
        if callable(move):  # trained predictors run where the weights are (e.g. the GPU)
            move(device=weights.device)
        if getattr(predictors, "idealised", False):
            predictors = ReplayedActiveSets(predictors)
        self.predictors = predictors
        self.check = check
        self.layers = [operator_weights(layer.ffn) for layer in weights.layers]
        # trained predictors run inside the operator call (one dispatch per layer)
        fusable = fused and hasattr(predictors, "fused_weights")
        self.fused = ([self.ops.prepare_ffn_predicted(f, predictors.fused_weights(i))
                       for i, f in enumerate(self.layers)] if fusable else None)
        thresholds = getattr(predictors, "gate_thresholds", None) if fused else None
        if thresholds is not None:  # CATS: the gate, its threshold and the FFN in one call
            self.fused = [self.ops.prepare_ffn_gate_threshold(f, t)
                          for f, t in zip(self.layers, thresholds, strict=True)]
        self.prepared = ([self.ops.prepare_ffn(f) for f in self.layers]
                         if self.fused is None else [])
        self.d_ffn = weights.layers[0].ffn.d_ffn
        # a prompt of many rows activates nearly every neuron (the union): one dense GEMM
        # beats the sparse kernels there, as in llama.cpp / PowerInfer (0: always sparse)
        self.dense_from_rows = dense_from_rows
        self.dense = DenseFFN(weights, linear=linear)
        self.active_sum = 0
        self.calls = 0

    def __call__(self, layer_idx: int, x: Tensor, observer: FFNObserver | None = None) -> Tensor:
        if 0 < self.dense_from_rows <= x.shape[0]:
            self.active_sum += self.d_ffn
            self.calls += 1
            return self.dense(layer_idx, x, observer)
        if self.fused is not None:
            y, idx = self.fused[layer_idx](x)
        else:
            idx = self.predictors.predict(layer_idx, x)
            if idx.device != x.device:  # a predictor that answers on the host (e.g. a replay)
                idx = idx.to(x.device, non_blocking=True)
            y = (self.ops.ffn(x, self.layers[layer_idx], idx, check=True) if self.check
                 else self.prepared[layer_idx](x, idx))
        if y.dtype != x.dtype:  # the prepared calls return fp32
            y = y.to(x.dtype)
        self.active_sum += int(idx.numel())
        self.calls += 1
        if observer is not None:
            mask = torch.zeros(x.shape[0], self.d_ffn, dtype=torch.bool, device=x.device)
            mask[:, idx.long()] = True
            observer.record(layer_idx, x, mask)
        return y

    def rewind(self) -> None:
        """A new generation starts (idealised predictors replay what they recorded)."""
        rewind = getattr(self.predictors, "rewind", None)
        if rewind is not None:
            rewind()

    def metrics(self) -> dict[str, float]:
        """Mean share of FFN neurons computed per layer call (union over the batch); for
        replayed (oracle) sets, the share of calls answered from the recording."""
        if not self.calls:
            return {}
        out = {"sparse_computed_fraction": self.active_sum / (self.calls * self.d_ffn)}
        if isinstance(self.predictors, ReplayedActiveSets):
            p = self.predictors
            out["oracle_replayed_share"] = p.replayed / max(p.replayed + p.asked, 1)
        return out
