"""NaN/inf guards: a model whose weights, activations or logits stop being finite fails the
run at once, naming the stage and the layer, instead of finishing with a NaN perplexity
that MLflow silently drops and an accuracy near chance.

- `check_finite_weights(model, stage)`: every parameter and buffer (one pass at load).
- `finite_guard(model, stage)`: while active, forward hooks on each decoder layer and the
  LM head check their output; the first non-finite one raises `NonFiniteError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

# decoder blocks of the HF families we load (OPT/Llama: layers.N, GPT-2/Falcon: h.N) + head
GUARDED = re.compile(r"(^|\.)(layers|h|blocks)\.\d+$|(^|\.)lm_head$")


class NonFiniteError(FloatingPointError):
    """NaN or inf in a model's weights, activations or logits (the message names where)."""


def nonfinite_kind(t: torch.Tensor) -> str:
    """'NaN' or 'inf': what makes `t` non-finite (for error messages)."""
    return "NaN" if torch.isnan(t).any() else "inf"


def check_finite_weights(model: torch.nn.Module, stage: str = "model") -> None:
    """Raise NonFiniteError naming the first parameter or buffer holding NaN/inf."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise NonFiniteError(
                f"{stage} stage: {nonfinite_kind(tensor)} in the weights of layer {name} "
                "(a corrupt or badly converted checkpoint); the run stops here")


def _first_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    logits = getattr(output, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else None


@contextmanager
def finite_guard(model: Any, stage: str) -> Iterator[None]:
    """Check the output of every decoder layer and the LM head during `stage`; the first
    NaN/inf raises NonFiniteError naming the layer and the stage. A model without torch
    modules (shape-only) is not guarded."""
    if not isinstance(model, torch.nn.Module):
        yield
        return

    def hook(name: str):
        def check(module: torch.nn.Module, args: Any, output: Any) -> None:
            tensor = _first_tensor(output)
            if tensor is not None and tensor.is_floating_point() \
                    and not torch.isfinite(tensor).all():
                what = "logits" if name.endswith("lm_head") else "activations"
                raise NonFiniteError(f"{stage} stage: {nonfinite_kind(tensor)} in the {what} of layer "
                                     f"{name}; the run stops here")
        return check

    handles = [module.register_forward_hook(hook(name))
               for name, module in model.named_modules() if GUARDED.search(name)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
