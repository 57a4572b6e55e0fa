"""Plain tensors pulled out of a Hugging Face decoder, laid out for our own loop.

`extract_weights(hf_model)` turns an `OPTForCausalLM` or a LLaMA-family
`LlamaForCausalLM` into a `DecoderWeights`: per-layer dataclasses of tensors, no
`nn.Module` left. Matrices keep the `nn.Linear` layout `[out, in]` (so a neuron's
input row is contiguous) and share storage with the HF model unless a dtype/device
change forces a copy. The FFN's output matrix is stored twice: `w2`/`w_down`
(`[d_model, d_ffn]`, for dense matmuls) and `w2_t`/`w_down_t` (`[d_ffn, d_model]`,
contiguous), because the sparse operators read each neuron's down column contiguously.
The decoder multiplies Q/K/V (and a gated FFN's gate/up) as one stacked matrix
(`AttentionWeights.qkv`, `GatedFFNWeights.gate_up`: one matrix product per token instead
of three / two, measured 3-6% faster decode for SmolLM2-135M on one thread); the separate
matrices then become row views of the stacked one.

Supported: OPT (learned positions with offset 2, pre- or post-LN, optional
project_in/out, biases) and LLaMA (RMSNorm, RoPE from the model's own `inv_freq`,
GQA, gate/up/down with `hidden_act` relu -> ReGLU, silu -> SwiGLU).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from powerbench.model.spec import FFNKind
from powerbench.ops.huge_pages import HugePages, use_huge_pages_all

NormKind = Literal["layer", "rms"]

log = logging.getLogger(__name__)

# RoPE variants whose frequencies change with the sequence length: our fixed table
# would not match them.
_DYNAMIC_ROPE = frozenset({"dynamic", "longrope"})


@dataclass
class NormWeights:
    kind: NormKind
    weight: Tensor | None  # None: no elementwise affine
    bias: Tensor | None
    eps: float


Stacked = tuple[Tensor, Tensor | None]  # (matrix, bias or None)


def stack_rows(owner: object, names: Sequence[str], bias_names: Sequence[str]) -> Stacked:
    """`owner`'s matrices `names` stacked by rows into one contiguous matrix (and their
    biases into one vector, zeros where a bias is None, or None if all are), after which
    those attributes are row views of it: the weights stay in memory once (a caller that
    holds the original tensors, e.g. an HF model sharing its fp32 parameters, keeps its
    own copy). Built outside autograd and inference mode, so the views are usable in
    either."""
    parts = [getattr(owner, n) for n in names]
    biases = [getattr(owner, n) for n in bias_names]
    rows = [p.shape[0] for p in parts]
    with torch.inference_mode(False), torch.no_grad():
        matrix = torch.cat([p.detach() for p in parts])
        bias = None if all(b is None for b in biases) else torch.cat(
            [b.detach() if b is not None else p.new_zeros(p.shape[0])
             for b, p in zip(biases, parts, strict=True)])
    for name, view in zip(names, matrix.split(rows), strict=True):
        setattr(owner, name, view)
    if bias is not None:
        for name, old, view in zip(bias_names, biases, bias.split(rows), strict=True):
            if old is not None:
                setattr(owner, name, view)
    return matrix, bias


@dataclass
class AttentionWeights:
    wq: Tensor  # [n_heads * head_dim, d_model]
    wk: Tensor  # [n_kv_heads * head_dim, d_model]
    wv: Tensor  # [n_kv_heads * head_dim, d_model]
    wo: Tensor  # [d_model, n_heads * head_dim]
    bq: Tensor | None = None
    bk: Tensor | None = None
    bv: Tensor | None = None
    bo: Tensor | None = None
    _qkv: Stacked | None = field(default=None, init=False, repr=False, compare=False)

    def qkv(self) -> Stacked:
        """[wq; wk; wv] and [bq; bk; bv] as one matrix and bias (see `stack_rows`)."""
        if self._qkv is None:
            self._qkv = stack_rows(self, ("wq", "wk", "wv"), ("bq", "bk", "bv"))
        return self._qkv


@dataclass
class ReluFFNWeights:
    """OPT: y = fc2(ReLU(fc1(x)))."""

    w1: Tensor  # [d_ffn, d_model] (fc1.weight; row n = neuron n's input weights)
    b1: Tensor | None  # [d_ffn]
    w2: Tensor  # [d_model, d_ffn] (fc2.weight)
    w2_t: Tensor  # [d_ffn, d_model] contiguous (row n = neuron n's output column)
    b2: Tensor | None  # [d_model]
    kind: FFNKind = FFNKind.relu

    @property
    def d_ffn(self) -> int:
        return self.w1.shape[0]


@dataclass
class GatedFFNWeights:
    """LLaMA: y = down(act(gate(x)) * up(x)), act = ReLU (ReGLU) or SiLU (SwiGLU)."""

    w_gate: Tensor  # [d_ffn, d_model]
    w_up: Tensor  # [d_ffn, d_model]
    w_down: Tensor  # [d_model, d_ffn]
    w_down_t: Tensor  # [d_ffn, d_model] contiguous
    kind: FFNKind  # REGLU or SWIGLU
    b_gate: Tensor | None = None  # only with config.mlp_bias
    b_up: Tensor | None = None
    b_down: Tensor | None = None
    _gate_up: Stacked | None = field(default=None, init=False, repr=False, compare=False)

    def gate_up(self) -> Stacked:
        """[w_gate; w_up] and their biases as one matrix and bias (see `stack_rows`)."""
        if self._gate_up is None:
            self._gate_up = stack_rows(self, ("w_gate", "w_up"), ("b_gate", "b_up"))
        return self._gate_up

    @property
    def d_ffn(self) -> int:
        return self.w_gate.shape[0]


FFNWeights = ReluFFNWeights | GatedFFNWeights


@dataclass
class LayerWeights:
    attn_norm: NormWeights
    attn: AttentionWeights
    ffn_norm: NormWeights
    ffn: FFNWeights


@dataclass
class RopeWeights:
    inv_freq: Tensor  # [head_dim // 2] fp32
    scaling: float = 1.0  # HF's attention_scaling, multiplies cos and sin


@dataclass
class DecoderWeights:
    model_type: str
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    pre_norm: bool  # False: OPT-350m's post-LN blocks
    embed: Tensor  # [vocab, d_embed]
    layers: list[LayerWeights]
    final_norm: NormWeights | None
    lm_head: Tensor  # [vocab, d_embed]
    max_positions: int
    pos_embed: Tensor | None = None  # OPT learned positions, [max_positions + offset, d_model]
    pos_offset: int = 0
    rope: RopeWeights | None = None
    project_in: Tensor | None = None  # [d_model, d_embed]
    project_out: Tensor | None = None  # [d_embed, d_model]

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def vocab_size(self) -> int:
        return self.lm_head.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def ffn_kind(self) -> FFNKind:
        return self.layers[0].ffn.kind


def use_huge_pages(weights: DecoderWeights) -> HugePages:
    """Every matrix of `weights` advised onto 2 MiB pages and collapsed there now
    (`powerbench.ops.huge_pages`: scattered neuron rows then share TLB entries). Q/K/V and
    a gated FFN's gate/up are stacked first (`stack_rows`, as the first decode step would),
    so the stacked matrices the decoder reads are the ones on huge pages. A no-op with the
    reason recorded off Linux, off the CPU, with THP `never`, or for matrices under 2 MiB."""
    tensors: list[Tensor | None] = [weights.embed, weights.lm_head, weights.pos_embed,
                                    weights.project_in, weights.project_out]
    for layer in weights.layers:
        tensors += [layer.attn.qkv()[0], layer.attn.wo]
        ffn = layer.ffn
        if isinstance(ffn, GatedFFNWeights):
            tensors += [ffn.gate_up()[0], ffn.w_down, ffn.w_down_t]
        elif isinstance(ffn, ReluFFNWeights):
            tensors += [ffn.w1, ffn.w2, ffn.w2_t]
    done = use_huge_pages_all(tensors)
    log.info("weights on 2 MiB pages: %d of %d MiB%s", done.huge_bytes >> 20, done.nbytes >> 20,
             f" ({done.reason})" if done.reason else "")
    return done


class _Converter:
    """Detaches (and optionally casts/moves) tensors; None passes through."""

    def __init__(self, dtype: torch.dtype | None, device: torch.device | str | None) -> None:
        self.dtype = dtype
        self.device = device

    def __call__(self, t: Tensor | None) -> Tensor | None:
        if t is None:
            return None
        return t.detach().to(device=self.device, dtype=self.dtype)

    def req(self, t: Tensor) -> Tensor:
        out = self(t)
        assert out is not None
        return out

    def transposed(self, t: Tensor) -> Tensor:
        return self.req(t).t().contiguous()

    def linear(self, module: Any) -> tuple[Tensor, Tensor | None]:
        return self.req(module.weight), self(module.bias)


def _attention(sa, out_proj, conv) -> AttentionWeights:
    """q/k/v/out projections of one attention block (OPT and LLaMA name only `out` apart)."""
    wq, bq = conv.linear(sa.q_proj)
    wk, bk = conv.linear(sa.k_proj)
    wv, bv = conv.linear(sa.v_proj)
    wo, bo = conv.linear(out_proj)
    return AttentionWeights(wq, wk, wv, wo, bq, bk, bv, bo)


def _layer_norm(module: Any, conv: _Converter) -> NormWeights:
    return NormWeights("layer", conv(module.weight), conv(module.bias), float(module.eps))


def _rms_norm(module: Any, conv: _Converter) -> NormWeights:
    return NormWeights("rms", conv.req(module.weight), None, float(module.variance_epsilon))


def _extract_opt(model: Any, conv: _Converter) -> DecoderWeights:
    cfg = model.config
    if cfg.activation_function != "relu":
        raise ValueError(f"OPT with activation {cfg.activation_function!r}: only relu is supported")
    dec = model.model.decoder
    layers = []
    for blk in dec.layers:
        w1, b1 = conv.linear(blk.fc1)
        w2, b2 = conv.linear(blk.fc2)
        layers.append(LayerWeights(
            attn_norm=_layer_norm(blk.self_attn_layer_norm, conv),
            attn=_attention(blk.self_attn, blk.self_attn.out_proj, conv),
            ffn_norm=_layer_norm(blk.final_layer_norm, conv),
            ffn=ReluFFNWeights(w1=w1, b1=b1, w2=w2, w2_t=conv.transposed(blk.fc2.weight), b2=b2),
        ))
    n_heads = cfg.num_attention_heads
    return DecoderWeights(
        model_type="opt",
        d_model=cfg.hidden_size,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        head_dim=cfg.hidden_size // n_heads,
        pre_norm=bool(cfg.do_layer_norm_before),
        embed=conv.req(dec.embed_tokens.weight),
        layers=layers,
        final_norm=(_layer_norm(dec.final_layer_norm, conv)
                    if dec.final_layer_norm is not None else None),
        lm_head=conv.req(model.get_output_embeddings().weight),
        max_positions=cfg.max_position_embeddings,
        pos_embed=conv.req(dec.embed_positions.weight),
        pos_offset=int(dec.embed_positions.offset),
        project_in=conv(dec.project_in.weight) if dec.project_in is not None else None,
        project_out=conv(dec.project_out.weight) if dec.project_out is not None else None,
    )


_GATED_KIND = {"relu": FFNKind.reglu, "silu": FFNKind.swiglu}


def _extract_llama(model: Any, conv: _Converter) -> DecoderWeights:
    cfg = model.config
    act = cfg.hidden_act
    if act not in _GATED_KIND:
        raise ValueError(f"LLaMA with hidden_act {act!r}: supported {sorted(_GATED_KIND)}")
    rotary = model.model.rotary_emb
    rope_type = getattr(rotary, "rope_type", "default")
    if rope_type in _DYNAMIC_ROPE:
        raise ValueError(f"rope_type {rope_type!r} depends on the sequence length; not supported")
    layers = []
    for blk in model.model.layers:
        mlp = blk.mlp
        wg, bg = conv.linear(mlp.gate_proj)
        wu, bu = conv.linear(mlp.up_proj)
        wd, bd = conv.linear(mlp.down_proj)
        layers.append(LayerWeights(
            attn_norm=_rms_norm(blk.input_layernorm, conv),
            attn=_attention(blk.self_attn, blk.self_attn.o_proj, conv),
            ffn_norm=_rms_norm(blk.post_attention_layernorm, conv),
            ffn=GatedFFNWeights(
                w_gate=wg, w_up=wu, w_down=wd, w_down_t=conv.transposed(mlp.down_proj.weight),
                kind=_GATED_KIND[act], b_gate=bg, b_up=bu, b_down=bd,
            ),
        ))
    n_heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    return DecoderWeights(
        model_type=cfg.model_type,
        d_model=cfg.hidden_size,
        n_heads=n_heads,
        n_kv_heads=getattr(cfg, "num_key_value_heads", None) or n_heads,
        head_dim=head_dim,
        pre_norm=True,
        embed=conv.req(model.model.embed_tokens.weight),
        layers=layers,
        final_norm=_rms_norm(model.model.norm, conv),
        lm_head=conv.req(model.get_output_embeddings().weight),
        max_positions=cfg.max_position_embeddings,
        rope=RopeWeights(
            inv_freq=rotary.inv_freq.detach().to(device=conv.device, dtype=torch.float32),
            scaling=float(rotary.attention_scaling),
        ),
    )


# model_type -> extractor; a new architecture is one more entry.
EXTRACTORS: dict[str, Callable[[Any, _Converter], DecoderWeights]] = {
    "opt": _extract_opt,
    "llama": _extract_llama,
}


def extract_weights(
    hf_model: Any,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    huge_pages: bool = True,
) -> DecoderWeights:
    """Pull a decoder's weights out of an HF causal-LM (`OPTForCausalLM`, `LlamaForCausalLM`).

    `dtype`/`device` default to the model's own; tensors then share storage with it
    (except the transposed down matrices, which are always copies). `huge_pages`: put the
    matrices on 2 MiB pages (`use_huge_pages`; shared storage is advised in place).
    """
    model_type = hf_model.config.model_type
    if model_type not in EXTRACTORS:
        raise ValueError(f"unsupported model_type {model_type!r}; supported: {sorted(EXTRACTORS)}")
    weights = EXTRACTORS[model_type](hf_model, _Converter(dtype, device))
    if huge_pages:
        use_huge_pages(weights)
    return weights
