"""The decoder's pluggable FFN: the seam where the sparse backends plug in.

The decoder calls `ffn(layer_idx, x, observer)` once per layer with the
post-norm FFN input flattened to `x` [n_tokens, d_model] (n_tokens = batch x new
tokens; 1 x batch during decode) and adds the returned [n_tokens, d_model] to the
residual stream. An implementation owns everything between: predicting active
neurons, calling a kernel, moving data between devices.

A sparse FFN reads its layer's weights from `weights.layers[layer_idx].ffn`
(`ReluFFNWeights`: w1, b1, w2_t, b2; `GatedFFNWeights`: w_gate, w_up, w_down_t) and
maps directly onto `powerbench.ops` backends, e.g.
`backend.ffn_relu(x, f.w1, f.b1, f.w2_t, f.b2, idx)`.

If `observer` is not None the FFN must call
`observer.record(layer_idx, x, active)` with `active` a bool [n_tokens, d_ffn] mask of
the neurons it computed as non-zero (dense: activation != 0; sparse: the predicted set
that was computed). With observer None it must not spend time on bookkeeping.

New FFNs are built by `_target_` from the engine yaml's `ffn` node:
`Target(weights=<DecoderWeights>, **node_params, **context)`, where `context` holds
only the keyword arguments of `run_engine(..., **context)` that the target's signature
accepts (e.g. `predictors=`, `placement=`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from powerbench.engine.decode_kernels import DecodeKernels, decode_kernels
from powerbench.engine.linear import LinearFn, make_linear
from powerbench.engine.weights import DecoderWeights, GatedFFNWeights, ReluFFNWeights
from powerbench.model.spec import FFNKind


@runtime_checkable
class FFNObserver(Protocol):
    def record(self, layer_idx: int, x: Tensor, active: Tensor) -> None:
        """x [n_tokens, d_model] FFN input; active bool [n_tokens, d_ffn]."""
        ...


@runtime_checkable
class FFN(Protocol):
    def __call__(self, layer_idx: int, x: Tensor, observer: FFNObserver | None = None) -> Tensor:
        """x [n_tokens, d_model] -> y [n_tokens, d_model] (same dtype and device)."""
        ...


def _relu_dense(f: ReluFFNWeights, x: Tensor, linear: LinearFn,
                kernels: DecodeKernels | None) -> tuple[Tensor, Tensor]:
    h = torch.relu(linear(x, f.w1, f.b1))
    return linear(h, f.w2, f.b2), h


# kind -> elementwise combination of (gate, up) pre-activations
_GATES = {
    FFNKind.reglu: lambda g, u: torch.relu(g) * u,
    FFNKind.swiglu: lambda g, u: F.silu(g) * u,
    FFNKind.drelu: lambda g, u: torch.relu(g) * torch.relu(u),
}


def _gated_dense(f: GatedFFNWeights, x: Tensor, linear: LinearFn,
                 kernels: DecodeKernels | None) -> tuple[Tensor, Tensor]:
    gate_up = linear(x, *f.gate_up())  # one product for both
    h = kernels.gated(gate_up, f.kind) if kernels is not None else None
    if h is None:
        h = _GATES[f.kind](*gate_up.chunk(2, dim=-1))
    return linear(h, f.w_down, f.b_down), h


_DENSE = {ReluFFNWeights: _relu_dense, GatedFFNWeights: _gated_dense}


class DenseFFN:
    """Every neuron, every token: the reference the sparse FFNs are compared against.

    Its matrix products use `linear` (default: `make_linear("auto")` for the weights'
    device, see `powerbench.engine.linear`); a gated FFN's activation is one fused operator
    on the CPU (`powerbench.engine.decode_kernels`; `fused=False`: torch's chunk, act, mul)."""

    def __init__(self, weights: DecoderWeights, linear: LinearFn | None = None,
                 fused: bool = True) -> None:
        self.weights = weights
        self.linear = linear if linear is not None else make_linear("auto", weights.device)
        self.kernels = decode_kernels(weights.device) if fused else None
        self._fns = [_DENSE[type(layer.ffn)] for layer in weights.layers]

    def __call__(self, layer_idx: int, x: Tensor, observer: FFNObserver | None = None) -> Tensor:
        f = self.weights.layers[layer_idx].ffn
        y, h = self._fns[layer_idx](f, x, self.linear, self.kernels)
        if observer is not None:
            observer.record(layer_idx, x, h != 0)
        return y

