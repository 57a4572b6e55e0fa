"""Where each architecture's FFN lives, and when one of its neurons counts as active.

A neuron is *active* for a token iff its coefficient on the down projection is nonzero,
i.e. the neuron's down-projection column contributes to the output:

- ReLU (OPT: fc1 -> ReLU -> fc2):           active <=> fc1(x)_n > 0
- ReGLU (LLaMA-ReGLU: relu(gate) * up):     active <=> gate(x)_n > 0 (up(x)_n == 0 exactly
  has probability zero, and a sparse kernel must load the neuron whenever relu(gate) > 0)
- dReLU (Bamboo, TurboSparse: relu(gate) * relu(up)): active <=> gate(x)_n > 0 AND up(x)_n > 0
- SwiGLU (SmolLM2, LLaMA-2: silu(gate) * up): active <=> gate(x)_n != 0, i.e. (almost)
  always: SiLU has no exact zeros. Such a profile says so (sparsity ~0) and still keeps
  the (hidden, mask) samples that threshold sparsity (predictor=threshold) is fitted on.

So every rule is "all of these probe Linear layers pass the kind's test (> 0, or != 0 for
SwiGLU)", and every probe sees the FFN input hidden state (after the block's pre-FFN
layer norm) as its forward input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from powerbench.model.spec import FFNKind

# Probe roles whose outputs must all be > 0 for a neuron to be active.
ACTIVE_RULES: dict[FFNKind, tuple[str, ...]] = {
    FFNKind("relu"): ("in",),
    FFNKind("reglu"): ("gate",),
    FFNKind("drelu"): ("gate", "up"),
    FFNKind("swiglu"): ("gate",),
}
# Kinds whose probe test is `!= 0` (no ReLU in front of the product), not `> 0`.
NONZERO_KINDS = frozenset({FFNKind("swiglu")})

ACTIVE_DEFINITIONS: dict[FFNKind, str] = {
    FFNKind("relu"): "fc1(x) > 0",
    FFNKind("reglu"): "gate(x) > 0",
    FFNKind("drelu"): "gate(x) > 0 and up(x) > 0",
    FFNKind("swiglu"): "silu(gate(x)) != 0 (SiLU has no exact zeros: dense)",
}


@dataclass(frozen=True)
class FFNAdapter:
    """How to reach one architecture's decoder layers and FFN probe Linear layers."""

    layers: Callable[[Any], Sequence[Any]]  # body -> decoder layers
    probes: Callable[[Any], dict[str, Any]]  # decoder layer -> role -> nn.Linear

    @staticmethod
    def body(model: Any) -> Any:
        """The transformer without the LM head (what we run: no logits needed)."""
        return getattr(model, "model", model)


def _opt_probes(layer: Any) -> dict[str, Any]:
    return {"in": layer.fc1}


def _gated_probes(layer: Any) -> dict[str, Any]:
    return {"gate": layer.mlp.gate_proj, "up": layer.mlp.up_proj}


_LLAMA_LIKE = FFNAdapter(layers=lambda body: body.layers, probes=_gated_probes)

ADAPTERS: dict[str, FFNAdapter] = {
    "opt": FFNAdapter(layers=lambda body: body.decoder.layers, probes=_opt_probes),
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
}


def adapter_for(model: Any) -> FFNAdapter:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ADAPTERS:
        raise ValueError(f"no FFN adapter for model_type {model_type!r}; supported: "
                         f"{sorted(ADAPTERS)} (add one to powerbench.profiling.adapters)")
    return ADAPTERS[model_type]


def active_rule(kind: FFNKind) -> tuple[str, ...]:
    kind = FFNKind(kind)
    if kind not in ACTIVE_RULES:
        raise ValueError(f"FFN kind {kind.value!r} has no activity rule to profile; "
                         f"profilable kinds: {[k.value for k in ACTIVE_RULES]}")
    return ACTIVE_RULES[kind]


def active_test(kind: FFNKind) -> Callable[[Any], Any]:
    """A probe output -> its neurons' bool activity (`> 0`, or `!= 0` for SwiGLU)."""
    return (lambda out: out != 0) if FFNKind(kind) in NONZERO_KINDS else (lambda out: out > 0)
