"""Threshold sparsity (CATS, Lee et al. 2024): drop the FFN neurons whose gate activation
is small in magnitude, per token, with a per-layer threshold fitted for a target sparsity.

For a gated FFN y = down(act(gate(x)) * up(x)) (SwiGLU: act = SiLU), neuron n is kept for
a token iff |act(gate(x))_n| > t_l. The threshold t_l of layer l is the `target_sparsity`
quantile of |act(gate(x))| over calibration FFN inputs x of that layer: the profile's
(hidden) samples, or a calibration pass over train text (`collect_ffn_inputs`). No
parameters are trained; the "predictor" is the layer's own gate, computed densely, so
the decode-time saving is the up rows and down columns of the dropped neurons
(`SparseOps.ffn_gate_threshold`, one call per layer).

`GateThresholdSet` satisfies the `ActivePredictor` protocol (per-row masks for the
masked evaluation, batch unions for the sparse engine) and exposes `gate_thresholds`,
which `SparseFFN` hands to the fused threshold operator. Importing this needs torch only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from powerbench.predictor.predictor_set import ModelShape, PredictorBase

GATE_ACTIVATIONS = {"swiglu": F.silu, "reglu": F.relu, "drelu": F.relu}


def gate_magnitudes(x: Tensor, w_gate: Tensor, kind: str = "swiglu") -> Tensor:
    """|act(x @ w_gate^T)| in fp32: x [n, d_model], w_gate [neurons, d_model]."""
    if kind not in GATE_ACTIVATIONS:
        raise ValueError(f"unknown gated kind {kind!r}; valid: {sorted(GATE_ACTIVATIONS)}")
    g = F.linear(x.to(device=w_gate.device, dtype=torch.float32), w_gate.float())
    return GATE_ACTIVATIONS[kind](g).abs()


def fit_threshold(magnitudes: Tensor, target_sparsity: float) -> float:
    """The threshold t such that a share `target_sparsity` of `magnitudes` is <= t
    (those neurons are dropped: kept iff |a| > t). 0 keeps everything that is nonzero."""
    if not 0.0 <= target_sparsity < 1.0:
        raise ValueError(f"target_sparsity must be in [0, 1), got {target_sparsity}")
    values = magnitudes.flatten().float()
    k = int(round(target_sparsity * values.numel()))
    if k == 0 or values.numel() == 0:
        return 0.0
    return float(torch.kthvalue(values.cpu(), k).values)


@dataclass(frozen=True)
class LayerThreshold:
    """One layer's fit: the threshold and the sparsity it gives on its calibration rows."""

    layer: int
    threshold: float
    calibration_sparsity: float  # share of (row, neuron) pairs with |act| <= threshold
    samples: int  # calibration rows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GateThresholdSet(PredictorBase):
    """Per-layer CATS thresholds on |act(gate(x))|, with the gate matrices that score them.

    The gate matrices are the model's own (shared storage, not copied); `to()` moves them.
    """

    strategy = "threshold"
    idealised = False  # the gate is computed for real inside the operator: timed

    def __init__(self, shape: ModelShape, gates: Sequence[Tensor], thresholds: Sequence[float],
                 kind: str = "swiglu", fits: Sequence[LayerThreshold] = (),
                 target_sparsity: float | None = None, info: dict | None = None) -> None:
        if len(gates) != shape.n_layers or len(thresholds) != shape.n_layers:
            raise ValueError(f"{len(gates)} gates / {len(thresholds)} thresholds for model "
                             f"{shape}")
        for i, w in enumerate(gates):
            if tuple(w.shape) != (shape.neurons, shape.d_model):
                raise ValueError(f"layer {i} gate is {tuple(w.shape)}, model {shape} needs "
                                 f"({shape.neurons}, {shape.d_model})")
        if kind not in GATE_ACTIVATIONS:
            raise ValueError(f"unknown gated kind {kind!r}; valid: {sorted(GATE_ACTIVATIONS)}")
        self.shape = shape
        self.gates = list(gates)
        self.thresholds = [float(t) for t in thresholds]
        self.kind = kind
        self.fits = list(fits)
        self.target_sparsity = target_sparsity
        self.info = dict(info or {})
        self.stats: list = []
        self.param_count = 0  # no parameters beyond the model's own gate

    @property
    def gate_thresholds(self) -> list[float]:
        """Per-layer thresholds for `SparseOps.prepare_ffn_gate_threshold`."""
        return list(self.thresholds)

    def _mask(self, layer_idx: int, x: Tensor) -> Tensor:
        mags = gate_magnitudes(x, self.gates[layer_idx], self.kind)
        return (mags > self.thresholds[layer_idx]).to(x.device)

    def to(self, device: torch.device | str | None = None,
           dtype: torch.dtype | None = None) -> GateThresholdSet:
        self.gates = [w.to(device=device, dtype=dtype) for w in self.gates]
        return self

    @property
    def calibration_sparsity(self) -> float:
        if not self.fits:
            return float("nan")
        return sum(f.calibration_sparsity for f in self.fits) / len(self.fits)

    def metrics(self, spec: Any, profile: Any = None) -> dict[str, float]:
        """SiLU neurons are all nonzero ("active"): recall = the share kept, precision 1."""
        kept = 1.0 - self.calibration_sparsity
        target = self.target_sparsity if self.target_sparsity is not None else float("nan")
        return {"predictor_recall": kept, "predictor_precision": 1.0,
                "predicted_active_fraction": kept, "true_active_fraction": 1.0,
                "predictor_param_bytes": 0.0, "predictor_param_share": 0.0,
                "predictor_train_s": 0.0, "predictor_target_sparsity": target,
                "predictor_calibration_sparsity": self.calibration_sparsity,
                "predictor_build_s": float(self.info.get("build_s", 0.0))}


def fit_gate_thresholds(shape: ModelShape | Any, gates: Sequence[Tensor],
                        samples: Sequence[Tensor], target_sparsity: float,
                        kind: str = "swiglu", info: dict | None = None) -> GateThresholdSet:
    """Fit every layer's threshold on its calibration FFN inputs `samples[l]` [n, d_model]."""
    shape = ModelShape.of(shape)
    if len(samples) != len(gates):
        raise ValueError(f"{len(samples)} sample sets for {len(gates)} layers")
    thresholds, fits = [], []
    for layer, (w, x) in enumerate(zip(gates, samples, strict=True)):
        mags = gate_magnitudes(x, w, kind)
        t = fit_threshold(mags, target_sparsity)
        sparsity = float((mags <= t).float().mean()) if t > 0 else float((mags == 0).float()
                                                                          .mean())
        thresholds.append(t)
        fits.append(LayerThreshold(layer, t, sparsity, int(x.shape[0])))
    return GateThresholdSet(shape, gates, thresholds, kind, fits, target_sparsity, info)


# ---- where the calibration FFN inputs come from ---------------------------------------

def profile_ffn_inputs(profile: Any) -> list[Tensor] | None:
    """The profile's per-layer FFN-input samples (fp16 hidden states), or None if it has
    none (synthetic profiles)."""
    if profile is None or not getattr(profile, "layers", None):
        return None
    if any(layer.hidden is None or len(layer.hidden) == 0 for layer in profile.layers):
        return None
    return [torch.from_numpy(layer.hidden).float() for layer in profile.layers]


@torch.inference_mode()
def collect_ffn_inputs(model: torch.nn.Module, windows: Tensor, max_samples: int = 4096,
                       batch_size: int = 8, seed: int = 0) -> list[Tensor]:
    """FFN inputs (what gate_proj sees) of every layer, from a forward pass of `model`
    over token `windows` [n, seq]; at most `max_samples` rows per layer, the same token
    positions in every layer (seeded uniform choice)."""
    from powerbench.predictor.hf_ffn import ffn_modules

    layers = ffn_modules(model)
    kept: list[list[Tensor]] = [[] for _ in layers]

    def keep(i: int):
        def hook(_module, args):
            kept[i].append(args[0].detach().reshape(-1, args[0].shape[-1]).float().cpu())
        return hook

    handles = [f.input.register_forward_pre_hook(keep(i)) for i, f in enumerate(layers)]
    device = next(model.parameters()).device
    try:
        for start in range(0, windows.shape[0], batch_size):
            model(windows[start:start + batch_size].to(device), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    rows = [torch.cat(k) for k in kept]
    n = rows[0].shape[0]
    if n > max_samples:
        g = torch.Generator().manual_seed(seed)
        pick = torch.randperm(n, generator=g)[:max_samples].sort().values
        rows = [r.index_select(0, pick) for r in rows]
    return rows


def model_gates(model: torch.nn.Module) -> tuple[list[Tensor], str]:
    """Each layer's gate matrix [neurons, d_model] of a transformers gated FFN (shared
    storage) and the FFN kind (swiglu / reglu)."""
    from powerbench.predictor.hf_ffn import ffn_modules

    act = getattr(model.config, "hidden_act", None)
    kind = {"silu": "swiglu", "relu": "reglu"}.get(str(act))
    if getattr(model.config, "model_type", None) == "opt" or kind is None:
        raise ValueError("gate thresholds need a gated FFN (LLaMA-family gate/up/down); "
                         f"this model has model_type={model.config.model_type!r}, "
                         f"hidden_act={act!r}")
    return [f.input.weight.detach() for f in ffn_modules(model)], kind
