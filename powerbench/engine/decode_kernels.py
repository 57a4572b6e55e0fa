"""Fused CPU operators for one decode step: RMSNorm, the attention core after Q/K/V, and
the gated FFN's activation.

At decode (one new token per row) a layer's RMSNorm in fp16 is six torch operators, and
its rotary embedding, KV-cache writes, scaled-dot-product attention and the reshapes
around them about twenty more; each costs a few microseconds of dispatch and does almost
no arithmetic; a gated FFN's chunk, activation and product are four more. On SmolLM2-135M
(fp16, one thread) everything outside the matrix products took ~13 ms of a ~42 ms step. `decode_kernels()` returns the C++ versions from the CPU
extension (`csrc/decode_cpu_kernels_impl.h`, on the CPU's ISA path, vectorised: rotary
embedding, RMSNorm scaling and SiLU in registers; one call each; rounding where the torch chain
rounds, see there), or None where they do not apply (not a CPU, extension unavailable),
and the decoder then keeps the torch chain. Prompts (several new tokens) and padded
batches always take the torch chain for attention.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from powerbench.engine.weights import NormWeights
from powerbench.model.spec import FFNKind

_GATED_KINDS = {FFNKind.reglu: 0, FFNKind.drelu: 1, FFNKind.swiglu: 2}  # the C++ enum


@dataclass(frozen=True)
class DecodeKernels:
    # (x [..., D], weight [D] | None, eps) -> HF RMSNorm of x, in x's dtype
    rms_norm_op: Callable[[Tensor, Tensor | None, float], Tensor]
    # (qkv [B, 1, (H + 2 KV) hd], cos [B, hd] | None, sin, k_cache, v_cache, pos, H, scale)
    # -> [B, 1, H hd]; writes the new K (rotated) and V at row `pos` of the caches
    attention_op: Callable[..., Tensor]
    # (y = [gate | up] [..., 2 N], kind) -> act(gate) * f(up) [..., N], in y's dtype
    gated_op: Callable[[Tensor, int], Tensor]

    def rms_norm(self, x: Tensor, w: NormWeights) -> Tensor | None:
        """`w` applied to `x` by the fused kernel, or None if it does not apply here."""
        if w.kind != "rms" or not x.is_contiguous() or (
                w.weight is not None and w.weight.dtype != x.dtype):
            return None
        return self.rms_norm_op(x, w.weight, w.eps)

    def gated(self, gate_up: Tensor, kind: FFNKind) -> Tensor | None:
        """act(gate) * f(up) of the stacked gate/up product, or None if not covered."""
        if kind not in _GATED_KINDS or not gate_up.is_contiguous():
            return None
        return self.gated_op(gate_up, _GATED_KINDS[kind])


def decode_kernels(device: torch.device | str) -> DecodeKernels | None:
    """The fused decode operators for weights on `device`, or None (see the module doc)."""
    return _cpu_kernels() if torch.device(device).type == "cpu" else None


@functools.cache
def _cpu_kernels() -> DecodeKernels | None:
    """Looked up once per process (a decoder and its dense FFN both ask)."""
    from powerbench.ops import BackendUnavailable, get_backend

    try:
        get_backend("sparse_cpu", fallback=False)  # builds and loads the extension
    except BackendUnavailable:
        return None
    from powerbench.ops.extension_build import load_cpu_extension

    ops = load_cpu_extension()  # the module's functions: no dispatcher on the decode path
    return DecodeKernels(ops.rms_norm, ops.decode_attention, ops.gated_activation)
