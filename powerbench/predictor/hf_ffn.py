"""Where the FFN of each layer sits in a transformers causal LM.

`ffn_modules(model)` gives, per layer, the module whose input is the FFN input x
(fc1 / gate_proj), the module whose input is the neuron activations h (fc2 /
down_proj), and the pre-activation modules whose outputs decide which neurons are
non-zero (ReLU: fc1(x) > 0; ReGLU: gate(x) > 0; SwiGLU: none, every neuron is live).
Architectures are looked up by `config.model_type`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class HFFFN:
    input: nn.Module  # its input is x [.., d_model]
    output: nn.Module  # its input is h [.., neurons]
    pre_activations: tuple[nn.Module, ...]  # neuron n active iff every one gives > 0 at n


def _opt(model: nn.Module) -> list[HFFFN]:
    if model.config.activation_function != "relu":
        raise ValueError(f"OPT activation {model.config.activation_function!r}: only relu "
                         "gives exact zeros")
    return [HFFFN(layer.fc1, layer.fc2, (layer.fc1,)) for layer in model.model.decoder.layers]


_GATED_PRE_ACTS: dict[str, Callable[[nn.Module], tuple[nn.Module, ...]]] = {
    "relu": lambda mlp: (mlp.gate_proj,),  # ReGLU: relu(gate) * up
    "silu": lambda mlp: (),  # SwiGLU: no exact zeros
}


def _llama(model: nn.Module) -> list[HFFFN]:
    act = getattr(model.config, "hidden_act", "silu")
    if act not in _GATED_PRE_ACTS:
        raise ValueError(f"unsupported gated activation {act!r}; known: {sorted(_GATED_PRE_ACTS)}")
    return [HFFFN(layer.mlp.gate_proj, layer.mlp.down_proj, _GATED_PRE_ACTS[act](layer.mlp))
            for layer in model.model.layers]


_LOCATORS: dict[str, Callable[[nn.Module], list[HFFFN]]] = {
    "opt": _opt,
    "llama": _llama,
    "mistral": _llama,
}


def ffn_modules(model: nn.Module) -> list[HFFFN]:
    model_type = getattr(model.config, "model_type", None)
    if model_type not in _LOCATORS:
        raise ValueError(f"no FFN locator for model_type {model_type!r}; known: "
                         f"{sorted(_LOCATORS)}")
    return _LOCATORS[model_type](model)
