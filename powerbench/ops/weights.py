"""Weight preparation for the sparse FFN operators, done once per model load.

The operators want every neuron's weights contiguous: fc1/gate/up rows as HF stores them
(``[d_ffn, d_model]``) and the down projection transposed (HF ``fc2.weight``/``down_proj``
is ``[d_model, d_ffn]``; stored here as ``[d_ffn, d_model]``). Biases are kept in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GATED_KINDS = ("reglu", "drelu", "swiglu")


@dataclass(frozen=True)
class ReluFFNWeights:
    """OPT-style fc1 -> ReLU -> fc2, down projection transposed."""

    w1: torch.Tensor  # [d_ffn, d_model]
    b1: torch.Tensor | None  # [d_ffn] fp32
    w2_t: torch.Tensor  # [d_ffn, d_model]
    b2: torch.Tensor | None  # [d_model] fp32

    @property
    def d_ffn(self) -> int:
        return self.w1.shape[0]

    @property
    def d_model(self) -> int:
        return self.w1.shape[1]


@dataclass(frozen=True)
class GatedFFNWeights:
    """Gated FFN (ReGLU / dReLU / SwiGLU) without biases, down projection transposed."""

    w_gate: torch.Tensor  # [d_ffn, d_model]
    w_up: torch.Tensor  # [d_ffn, d_model]
    w_down_t: torch.Tensor  # [d_ffn, d_model]
    kind: str = "reglu"

    def __post_init__(self) -> None:
        if self.kind not in GATED_KINDS:
            raise ValueError(f"unknown gated kind {self.kind!r}; valid: {', '.join(GATED_KINDS)}")

    @property
    def d_ffn(self) -> int:
        return self.w_gate.shape[0]

    @property
    def d_model(self) -> int:
        return self.w_gate.shape[1]


@dataclass(frozen=True)
class PredictorWeights:
    """One layer's activation predictor as the fused operators take it: logits =
    act(w1 . x + b1) . w2_t + b2 (act: ReLU when ``hidden_relu``, else identity); a neuron
    is active for a token when its logit is >= ``threshold``. The output layer is stored
    transposed (``w2_t`` = fc2.weight.T, contiguous): r rows the CPU kernel adds up, and
    it skips the rows whose hidden unit is zero."""

    w1: torch.Tensor  # [rank, d_model]
    b1: torch.Tensor | None  # [rank] fp32
    w2_t: torch.Tensor  # [rank, d_ffn]
    b2: torch.Tensor | None  # [d_ffn] fp32
    threshold: float
    hidden_relu: bool = True

    @property
    def d_ffn(self) -> int:
        return self.w2_t.shape[1]

    @property
    def d_model(self) -> int:
        return self.w1.shape[1]


def _store(w: torch.Tensor, dtype: torch.dtype | None, device: torch.device | str | None,
           transpose: bool = False) -> torch.Tensor:
    w = w.detach()
    if transpose:
        w = w.t()
    return w.to(device=device, dtype=dtype or w.dtype).contiguous()


def _bias(b: torch.Tensor | None, device: torch.device | str | None) -> torch.Tensor | None:
    return None if b is None else b.detach().to(device=device, dtype=torch.float32).contiguous()


def prepare_relu_ffn(
    fc1_weight: torch.Tensor,
    fc1_bias: torch.Tensor | None,
    fc2_weight: torch.Tensor,
    fc2_bias: torch.Tensor | None,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> ReluFFNWeights:
    """From HF layouts: fc1 ``[d_ffn, d_model]``, fc2 ``[d_model, d_ffn]`` (transposed here)."""
    if fc2_weight.shape != fc1_weight.shape[::-1]:
        raise ValueError(f"fc2 weight {tuple(fc2_weight.shape)} is not the transpose of "
                         f"fc1 weight {tuple(fc1_weight.shape)}")
    return ReluFFNWeights(
        w1=_store(fc1_weight, dtype, device),
        b1=_bias(fc1_bias, device),
        w2_t=_store(fc2_weight, dtype, device, transpose=True),
        b2=_bias(fc2_bias, device),
    )


def prepare_gated_ffn(
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    *,
    kind: str = "reglu",
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> GatedFFNWeights:
    """From HF layouts: gate/up ``[d_ffn, d_model]``, down ``[d_model, d_ffn]`` (transposed)."""
    if up_weight.shape != gate_weight.shape or down_weight.shape != gate_weight.shape[::-1]:
        raise ValueError(f"inconsistent gated FFN shapes: gate {tuple(gate_weight.shape)}, "
                         f"up {tuple(up_weight.shape)}, down {tuple(down_weight.shape)}")
    return GatedFFNWeights(
        w_gate=_store(gate_weight, dtype, device),
        w_up=_store(up_weight, dtype, device),
        w_down_t=_store(down_weight, dtype, device, transpose=True),
        kind=kind,
    )
