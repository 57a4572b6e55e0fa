"""The oracle: the true active set, computed from the activation itself.

It recomputes each layer's pre-activations (e.g. fc1(x) > 0), so its masks equal the
model's own; it is the accuracy bound (sparse output == dense output for ReLU models)
and, as an idealised predictor that costs nothing, the speed bound. Its parameter
count is reported as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from powerbench.predictor.hf_ffn import ffn_modules
from powerbench.predictor.predictor_set import ModelShape, PredictorBase, mean_active_fraction

MaskFn = Callable[[Tensor], Tensor]  # x [batch, d_model] -> bool [batch, neurons]


def _mask_from_modules(pre_activations: Sequence[nn.Module], neurons: int) -> MaskFn:
    @torch.inference_mode()
    def mask(x: Tensor) -> Tensor:
        active = torch.ones(x.shape[0], neurons, dtype=torch.bool, device=x.device)
        for module in pre_activations:  # the HF model may live elsewhere than the engine
            w = module.weight
            active &= (module(x.to(device=w.device, dtype=w.dtype)) > 0).to(x.device)
        return active

    return mask


class OraclePredictorSet(PredictorBase):
    strategy = "oracle"
    # Knowing the true mask is assumed free: an engine should not count the time of
    # `predict` (a dense pre-activation pass) against an oracle run's speed.
    idealised = True

    def __init__(self, shape: ModelShape, mask_fns: Sequence[MaskFn]) -> None:
        if len(mask_fns) != shape.n_layers:
            raise ValueError(f"{len(mask_fns)} oracle layers for model {shape}")
        self.shape = shape
        self.mask_fns = list(mask_fns)
        self.stats: list = []
        self.info: dict = {}
        self.param_count = 0

    def _mask(self, layer_idx: int, x: Tensor) -> Tensor:
        return self.mask_fns[layer_idx](x)

    def metrics(self, spec, profile) -> dict[str, float]:
        true_active = mean_active_fraction(profile)
        return {"predictor_recall": 1.0, "predictor_precision": 1.0,
                "predicted_active_fraction": true_active, "true_active_fraction": true_active,
                "predictor_param_bytes": 0.0, "predictor_param_share": 0.0,
                "predictor_train_s": 0.0}

    @classmethod
    def from_hf(cls, model: nn.Module, spec) -> OraclePredictorSet:
        shape = ModelShape.of(spec)
        layers = ffn_modules(model)
        return cls(shape, [_mask_from_modules(f.pre_activations, shape.neurons) for f in layers])
