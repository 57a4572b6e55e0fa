"""Real-size decoders with SYNTHETIC (seeded random) weights, for speed measurements only.

`synthetic_decoder_weights(spec, dtype, seed)` builds a full `DecoderWeights` of a model
spec's shape (no transformers model object): attention (Q/K/V/O), norms, FFN, the LM
head, embeddings and positions, every matrix seeded random with std 1/sqrt(fan_in) so the
residual stream stays finite. OPT specs (ffn_kind relu) get OPT's layout (LayerNorm,
biases, learned positions with offset 2, tied embeddings); gated specs (reglu, swiglu,
drelu) get LLaMA's (RMSNorm, RoPE, no biases). The input embedding shares the LM head's
tensor (tied, as OPT; for LLaMA an untied embedding would be a second copy that a decode
step only gathers one row of, so sharing changes no timed byte). The FFN output matrix is
stored in both layouts, as `extract_weights` does: `w2`/`w_down` for the dense GEMV and
`w2_t`/`w_down_t` (neuron-major) for the sparse operators. `synthetic_ffn(spec, layer)`
draws one layer's FFN from its own seed (the flash file's streamed writer draws them one
at a time); `ffn="per_layer"` builds the decoder with those, `ffn="none"` without any
(`FFNInFile`: the FFN lives in the flash engine's file only).

Random weights do not activate like trained ones, so the sparse engine's active sets are
not computed from them: `TraceReplay` replays per-token active sets drawn by
`powerbench.profiling.synthetic.synthetic_profile` (fitted to the published sparsity and
skew; OPT ~97% inactive per token), one trace token per decode row,
the union over a call's rows (a batch or a prompt), from the start of the trace on every
generation (`rewind`), so every round does the same work: an oracle that costs nothing.
With `rank > 0` it also runs a seeded random low-rank predictor MLP (d_model -> rank ->
d_ffn, ReLU, as PowerInfer's predictors) per call and discards its answer: the predictor's
cost is measured (in torch, unfused), its accuracy is the oracle's.

Only the speed of these decoders is meaningful; the tokens they produce are not.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from powerbench.engine.weights import (
    AttentionWeights,
    DecoderWeights,
    GatedFFNWeights,
    LayerWeights,
    NormWeights,
    ReluFFNWeights,
    RopeWeights,
    use_huge_pages,
)
from powerbench.model.spec import FFNKind, ModelSpec
from powerbench.profiling.active_traces import TraceActiveSets

DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "fp32": torch.float32}
OPT_POS_OFFSET = 2  # OPT's learned positions start at index 2
ROPE_THETA = 10_000.0


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r}: choose one of {sorted(DTYPES)}")
    return DTYPES[name]


def synthetic_spec(model_cfg: Any, layers: int | None = None) -> ModelSpec:
    """The ModelSpec of a typed model config (its `spec` section; a task's yaml has Hydra
    compose it, e.g. `model@task.synthetic_model=opt_6_7b`), with at most `layers` layers."""
    from powerbench.model.loading import spec_from_config

    name = getattr(model_cfg, "name", "?")
    if getattr(model_cfg, "spec", None) is None:
        raise ValueError(f"model={name} has no `spec` section (shapes): synthetic weights need "
                         "one (e.g. opt_6_7b, llama_reglu_7b); add it to conf/model/<name>.yaml "
                         "or choose a model that has one")
    spec = spec_from_config(model_cfg)
    if spec.n_experts > 1:
        raise ValueError(f"model={name} is a mixture of experts: not supported by the decoder")
    if layers is not None:
        if layers <= 0:
            raise ValueError("task.layers must be positive")
        spec = dataclasses.replace(spec, n_layers=min(layers, spec.n_layers))
    return spec


class _Random:
    """Seeded random tensors, drawn in the target dtype (no fp32 staging copy)."""

    def __init__(self, seed: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.dtype = dtype
        self.device = torch.device(device)  # drawn on the CPU (same values), then moved

    def matrix(self, rows: int, cols: int) -> Tensor:
        t = torch.randn(rows, cols, generator=self.g, dtype=self.dtype).mul_(cols ** -0.5)
        return t.to(self.device)

    def vector(self, n: int, scale: float = 0.01) -> Tensor:
        return torch.randn(n, generator=self.g, dtype=self.dtype).mul_(scale).to(self.device)


def _norm(kind: str, d: int, dtype: torch.dtype, device: torch.device) -> NormWeights:
    if kind == "layer":
        return NormWeights("layer", torch.ones(d, dtype=dtype, device=device),
                           torch.zeros(d, dtype=dtype, device=device), 1e-5)
    return NormWeights("rms", torch.ones(d, dtype=dtype, device=device), None, 1e-6)


@dataclass(frozen=True)
class FFNInFile:
    """A layer's FFN that is not in DRAM (its weights live in the flash engine's file):
    the kind and width only, for `DecoderWeights.ffn_kind`; no dense FFN can run it."""

    kind: FFNKind
    d_ffn: int


FFNMode = Literal["inline", "per_layer", "none"]


def synthetic_ffn(spec: ModelSpec, layer: int, dtype: torch.dtype = torch.float16,
                  seed: int = 0, dense_copy: bool = True) -> ReluFFNWeights | GatedFFNWeights:
    """Layer `layer`'s FFN, seeded by (seed, layer) alone: any one layer can be drawn
    without the others (the flash file's streamed, resumable writer draws them one at a
    time). `dense_copy` False: `w2`/`w_down` is a transposed view, not a second copy."""
    rnd = _Random(seed * 1_000_003 + 7_919 * (layer + 1), dtype)
    d, f = spec.d_model, spec.d_ffn
    if spec.ffn_kind == FFNKind.relu:
        w2_t = rnd.matrix(f, d).mul_(math.sqrt(d / f))  # fan-in of fc2 is d_ffn
        w2 = w2_t.t().contiguous() if dense_copy else w2_t.t()
        return ReluFFNWeights(w1=rnd.matrix(f, d), b1=rnd.vector(f), w2=w2, w2_t=w2_t,
                              b2=rnd.vector(d))
    w_down_t = rnd.matrix(f, d).mul_(math.sqrt(d / f))
    w_down = w_down_t.t().contiguous() if dense_copy else w_down_t.t()
    return GatedFFNWeights(w_gate=rnd.matrix(f, d), w_up=rnd.matrix(f, d), w_down=w_down,
                           w_down_t=w_down_t, kind=spec.ffn_kind)


def synthetic_decoder_weights(spec: ModelSpec, dtype: torch.dtype = torch.float16,
                              seed: int = 0, ffn: FFNMode = "inline",
                              device: torch.device | str = "cpu",
                              huge_pages: bool = True) -> DecoderWeights:
    """A `DecoderWeights` of `spec`'s shape with seeded random weights (see the module
    docstring); `spec.n_layers` layers, `spec.vocab_size` rows in the LM head.

    `ffn`: "inline" draws each FFN from the same generator as the attention (the
    original sequence); "per_layer" uses `synthetic_ffn` (the flash file's weights);
    "none" leaves the FFNs out (`FFNInFile`: a decoder whose FFN is read from flash holds
    attention, norms, embeddings and the LM head only). "per_layer" and "none" draw the
    same non-FFN weights. `device`: where the weights live (each matrix is drawn on the
    CPU, the same values on every device, and moved there at once). `huge_pages`: the
    matrices on 2 MiB pages (`powerbench.engine.weights.use_huge_pages`)."""
    if ffn not in ("inline", "per_layer", "none"):
        raise ValueError(f"ffn={ffn!r}: choose inline, per_layer or none")
    device = torch.device(device)
    rnd = _Random(seed, dtype, device)
    d, f = spec.d_model, spec.d_ffn
    hd = spec.head_dim
    q_out, kv_out = spec.n_heads * hd, spec.n_kv_heads * hd
    opt = spec.ffn_kind == FFNKind.relu
    norm_kind = "layer" if opt else "rms"
    layers = []
    for i in range(spec.n_layers):
        attn = AttentionWeights(wq=rnd.matrix(q_out, d), wk=rnd.matrix(kv_out, d),
                                wv=rnd.matrix(kv_out, d), wo=rnd.matrix(d, q_out))
        if opt:
            attn.bq, attn.bk, attn.bv, attn.bo = (rnd.vector(q_out), rnd.vector(kv_out),
                                                  rnd.vector(kv_out), rnd.vector(d))
        layer_ffn: ReluFFNWeights | GatedFFNWeights | FFNInFile
        if ffn == "none":
            layer_ffn = FFNInFile(spec.ffn_kind, f)
        elif ffn == "per_layer":
            layer_ffn = _moved(synthetic_ffn(spec, i, dtype, seed), device)
        elif opt:
            w2_t = rnd.matrix(f, d).mul_(math.sqrt(d / f))  # fan-in of fc2 is d_ffn
            layer_ffn = ReluFFNWeights(
                w1=rnd.matrix(f, d), b1=rnd.vector(f), w2=w2_t.t().contiguous(), w2_t=w2_t,
                b2=rnd.vector(d))
        else:
            w_down_t = rnd.matrix(f, d).mul_(math.sqrt(d / f))
            layer_ffn = GatedFFNWeights(w_gate=rnd.matrix(f, d), w_up=rnd.matrix(f, d),
                                        w_down=w_down_t.t().contiguous(), w_down_t=w_down_t,
                                        kind=spec.ffn_kind)
        layers.append(LayerWeights(attn_norm=_norm(norm_kind, d, dtype, device), attn=attn,
                                   ffn_norm=_norm(norm_kind, d, dtype, device),
                                   ffn=layer_ffn))  # type: ignore[arg-type]
    lm_head = rnd.matrix(spec.vocab_size, d)
    common: dict[str, Any] = dict(
        d_model=d, n_heads=spec.n_heads, n_kv_heads=spec.n_kv_heads, head_dim=hd,
        pre_norm=True, embed=lm_head, layers=layers,
        final_norm=_norm(norm_kind, d, dtype, device),
        lm_head=lm_head, max_positions=spec.max_positions)
    if opt:
        weights = DecoderWeights(model_type="opt", pos_offset=OPT_POS_OFFSET,
                                 pos_embed=rnd.matrix(spec.max_positions + OPT_POS_OFFSET, d),
                                 **common)
    else:
        inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        weights = DecoderWeights(model_type="llama", rope=RopeWeights(inv_freq=inv_freq),
                                 **common)
    if huge_pages:
        use_huge_pages(weights)
    return weights


def _moved(ffn: Any, device: torch.device) -> Any:
    """A layer's FFN weights on `device` (a view stays a view of the moved tensor)."""
    if device.type == "cpu":
        return ffn
    moved = {f.name: getattr(ffn, f.name) for f in dataclasses.fields(ffn)}
    for name, t in moved.items():
        if isinstance(t, Tensor) and t.is_contiguous():
            moved[name] = t.to(device)
    for name, t in moved.items():  # non-contiguous: the transposed view of its partner
        if isinstance(t, Tensor) and not t.is_contiguous():
            moved[name] = moved[name + "_t"].t()
    return type(ffn)(**moved)


def trace_profile(spec: ModelSpec, layers: int, trace_tokens: int, seed: int = 0) -> Any:
    """`synthetic_profile` of the FULL model `spec` (its depth profile), keeping `layers`
    layers evenly spaced over the depth (all of them when layers >= spec.n_layers): a
    capped benchmark sees the whole model's mix of cold and hot layers."""
    from powerbench.profiling.synthetic import synthetic_profile

    profile = synthetic_profile(spec, trace_tokens=trace_tokens, seed=seed)
    keep = np.unique(np.linspace(0, spec.n_layers - 1, min(layers, spec.n_layers)).round()
                     .astype(int))
    return SimpleNamespace(n_layers=len(keep), layers=[profile.layers[i] for i in keep],
                           layer_ids=[int(i) for i in keep])


def kept_profile(trace: Any, spec: ModelSpec) -> Any:
    """The kept layers of `trace_profile` as an ActivationProfile of the capped `spec` (the
    simulator indexes layers 0..n-1; the same per-token traces the engine replays)."""
    from powerbench.profiling.activation_profile import ActivationProfile

    layers = [dataclasses.replace(layer, index=i) for i, layer in enumerate(trace.layers)]
    return ActivationProfile(model=spec.name, source="synthetic", dataset="synthetic",
                             n_tokens=layers[0].n_tokens, layers=layers,
                             meta={"layer_ids": trace.layer_ids})


class TraceReplay(TraceActiveSets):
    """Active sets replayed from a synthetic profile's per-token trace (see the module
    docstring): a call of r rows gets the union of the next r trace tokens' sets in every
    layer, and the trace advances after the last layer; `rewind` restarts it. With
    `rank > 0` a random low-rank predictor MLP runs on every call (cost only)."""

    def __init__(self, profile: Any, rank: int = 0, d_model: int = 0,
                 dtype: torch.dtype = torch.float32, seed: int = 0) -> None:
        super().__init__(profile)
        self.strategy = "trace" if rank <= 0 else f"trace+predictor r{rank}"
        self.rows = 1
        self.mlps: list[tuple[Tensor, Tensor]] = []
        self.predicted: Tensor | None = None
        if rank > 0:
            d_ffn = len(profile.layers[0].counts)
            rnd = _Random(seed + 1, dtype)
            self.mlps = [(rnd.matrix(rank, d_model), rnd.matrix(d_ffn, rank))
                         for _ in range(self.n_layers)]

    @property
    def param_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for pair in self.mlps for t in pair)

    def rewind(self) -> None:
        self.seek(0)

    def predict(self, layer_idx: int, x: Tensor) -> Tensor:
        if self.mlps:  # the predictor's cost; its answer is replaced by the trace's
            a, b = self.mlps[layer_idx]
            self.predicted = (F.linear(torch.relu(F.linear(x, a)), b) > 0).any(0)
        rows = x.shape[0]
        sets = [self.sets[layer_idx][(self.step + r) % self.n_tokens] for r in range(rows)]
        ids = sets[0] if rows == 1 else torch.unique(torch.cat(sets))
        if layer_idx == self.n_layers - 1:
            self.step += rows
        return ids


class AllActive:
    """Every neuron active in every call (the sparse engine then computes the dense FFN)."""

    strategy = "all"

    def __init__(self, d_ffn: int) -> None:
        self.ids = torch.arange(d_ffn)

    def predict(self, layer_idx: int, x: Tensor) -> Tensor:
        return self.ids
