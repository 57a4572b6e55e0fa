"""The FFN-only flash benchmark's inputs: its shape, seeded random FFN weights, the
synthetic activation profile its active sets are drawn from, and whole-decoder weights
around the same FFNs (see `powerbench.measure.flash_ffn_bench`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from powerbench.engine.synthetic import torch_dtype
from powerbench.model.spec import ModelSpec


@dataclass(frozen=True)
class BenchShape:
    name: str = "opt_1_3b"
    n_layers: int = 24
    d_model: int = 2048
    d_ffn: int = 8192
    dtype: str = "fp16"  # fp16 | fp32
    token_sparsity: float = 0.97  # OPT family (published: 96-98% inactive)

    def __post_init__(self) -> None:
        torch_dtype(self.dtype)  # a clear error for any other name

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    @property
    def ffn_bytes(self) -> int:
        item = torch.empty((), dtype=self.torch_dtype).element_size()
        return 2 * self.n_layers * self.d_ffn * self.d_model * item


def synthetic_weights(shape: BenchShape, seed: int = 0) -> Any:
    """A `DecoderWeights` whose FFNs are seeded random (ReLU, OPT-style, biases); the rest
    (attention, embeddings) are 1-element placeholders: only FFNs are run."""
    from powerbench.engine.weights import (
        AttentionWeights,
        DecoderWeights,
        LayerWeights,
        NormWeights,
        ReluFFNWeights,
    )

    dtype = shape.torch_dtype
    g = torch.Generator().manual_seed(seed)
    d, f = shape.d_model, shape.d_ffn
    tiny = torch.zeros(1, 1, dtype=dtype)
    norm = NormWeights("layer", None, None, 1e-5)
    layers = []
    for _ in range(shape.n_layers):
        w1 = (torch.randn(f, d, generator=g) * d ** -0.5).to(dtype)
        w2_t = (torch.randn(f, d, generator=g) * f ** -0.5).to(dtype)
        b1 = (torch.randn(f, generator=g) * 0.01).to(dtype)
        b2 = (torch.randn(d, generator=g) * 0.01).to(dtype)
        ffn = ReluFFNWeights(w1=w1, b1=b1, w2=w2_t.t(), w2_t=w2_t, b2=b2)
        layers.append(LayerWeights(attn_norm=norm, attn=AttentionWeights(tiny, tiny, tiny, tiny),
                                   ffn_norm=norm, ffn=ffn))
    return DecoderWeights(model_type="opt", d_model=d, n_heads=1, n_kv_heads=1, head_dim=d,
                          pre_norm=True, embed=torch.zeros(1, d, dtype=dtype), layers=layers,
                          final_norm=None, lm_head=torch.zeros(1, d, dtype=dtype),
                          max_positions=1)


def decoder_weights_around(weights: Any, spec: ModelSpec, seed: int = 0) -> Any:
    """Whole-decoder weights of `spec`'s shape (seeded random attention, norms,
    positions, tied embedding / LM head: `synthetic_decoder_weights`) around the FFNs of
    `weights` (the FFN-only benchmark's, so both share one weight file)."""
    import dataclasses

    from powerbench.engine.synthetic import synthetic_decoder_weights

    model = spec.name
    ffn0 = weights.layers[0].ffn
    if (spec.n_layers, spec.d_model, spec.d_ffn) != (weights.n_layers, weights.d_model,
                                                       ffn0.d_ffn):
        raise ValueError(f"model={model} is {spec.n_layers} x {spec.d_model} x {spec.d_ffn}, "
                         f"the benchmarked FFNs {weights.n_layers} x {weights.d_model} x "
                         f"{ffn0.d_ffn}")
    # the spec's own FFNs are not built (8 neurons), then replaced by the benchmark's
    dec = synthetic_decoder_weights(dataclasses.replace(spec, d_ffn=8), weights.dtype, seed)
    layers = [dataclasses.replace(layer, ffn=src.ffn)
              for layer, src in zip(dec.layers, weights.layers, strict=True)]
    return dataclasses.replace(dec, layers=layers)


def synthetic_profile_for(shape: BenchShape, trace_tokens: int, seed: int = 0) -> Any:
    from powerbench.model.spec import FFNKind, SparsityStats
    from powerbench.profiling.synthetic import synthetic_profile

    heads = max(shape.d_model // 64, 1)
    spec = ModelSpec(name=shape.name, n_layers=shape.n_layers, d_model=shape.d_model,
                     d_ffn=shape.d_ffn, n_heads=heads, n_kv_heads=heads, ffn_kind=FFNKind.relu,
                     stats=SparsityStats(token_sparsity=shape.token_sparsity,
                                         source="bench: published OPT sparsity"))
    return synthetic_profile(spec, trace_tokens=trace_tokens, seed=seed)
