"""One FFN layer's activation predictor: x [batch, d_model] -> logits [batch, neurons].

`mlp` (PowerInfer): fc1 -> ReLU -> fc2 with hidden width r; `lowrank` (Deja Vu): the
same pair without the nonlinearity. A neuron is predicted active when its logit is at
least the layer's tuned `threshold` (a logit, so no sigmoid at inference).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from powerbench.predictor.config import PredictorArch

_HIDDEN_ACT: dict[PredictorArch, type[nn.Module]] = {
    PredictorArch.mlp: nn.ReLU,
    PredictorArch.lowrank: nn.Identity,
}


class LayerPredictor(nn.Module):
    def __init__(self, d_model: int, n_neurons: int, rank: int,
                 arch: PredictorArch | str = PredictorArch.mlp) -> None:
        super().__init__()
        if rank <= 0:
            raise ValueError(f"predictor rank must be positive, got {rank}")
        self.arch = PredictorArch(arch)
        self.d_model, self.n_neurons, self.rank = d_model, n_neurons, rank
        self.fc1 = nn.Linear(d_model, rank)
        self.act = _HIDDEN_ACT[self.arch]()
        self.fc2 = nn.Linear(rank, n_neurons)
        self.register_buffer("threshold", torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))

    @torch.inference_mode()
    def predict_mask(self, x: Tensor) -> Tensor:
        """bool [batch, neurons]: logit >= threshold."""
        dtype = self.fc1.weight.dtype
        return self(x.to(dtype)) >= self.threshold

    def fused_weights(self):
        """This predictor as the fused operators take it (`powerbench.ops.PredictorWeights`)."""
        from powerbench.ops.weights import PredictorWeights

        def bias(layer: nn.Linear) -> Tensor | None:
            return None if layer.bias is None else layer.bias.detach().float().contiguous()

        return PredictorWeights(
            w1=self.fc1.weight.detach().contiguous(), b1=bias(self.fc1),
            w2_t=self.fc2.weight.detach().t().contiguous(), b2=bias(self.fc2),
            threshold=float(self.threshold), hidden_relu=self.arch is PredictorArch.mlp)

    @property
    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def describe(self) -> dict:
        return {"d_model": self.d_model, "n_neurons": self.n_neurons, "rank": self.rank,
                "arch": self.arch.value}
