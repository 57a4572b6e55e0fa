"""Our decoder loop: prefill + token-by-token decode over a preallocated KV cache.

It runs the weights of `extract_weights` (OPT or LLaMA family) with a pluggable FFN
(see `powerbench.engine.ffn`), so dense and sparse runs share everything except the FFN.
Every dense projection (attention, output projection, and the dense FFN it builds) goes
through one `linear` callable chosen once (`powerbench.engine.linear.make_linear`; default
`auto`: the sparse_cpu matrix-vector kernel for decode-shaped CPU calls with fp16/bf16
weights, else `F.linear`). Where the CPU extension is available, RMSNorm, a gated dense
FFN's activation and, at decode (one new token per row, no padding), the attention core
after the Q/K/V product run as fused C++ operators (`powerbench.engine.decode_kernels`;
`fused=False` keeps the torch chain).

Batches: rows may have unequal prompt lengths if they are LEFT-padded and an
`attention_mask` [B, T] (1 = real token) is passed; positions then count real tokens
only, as in HF. The benchmark engines always pass equal-length rows and no mask.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from powerbench.engine.decode_kernels import decode_kernels
from powerbench.engine.ffn import FFN, DenseFFN, FFNObserver
from powerbench.engine.functional import RotaryTable, apply_rope, norm
from powerbench.engine.functional import attention_mask as build_attention_mask
from powerbench.engine.kv_cache import KVCache
from powerbench.engine.linear import LinearFn, make_linear
from powerbench.engine.sampling import Sampler, SamplingConfig
from powerbench.engine.timing import StepClock
from powerbench.engine.weights import AttentionWeights, DecoderWeights, NormWeights
from powerbench.model.guard import NonFiniteError, nonfinite_kind


@dataclass
class Generation:
    tokens: Tensor  # [B, N] generated ids
    logits: Tensor | None = None  # [B, N, V] logits each token was chosen from (if asked)


class Decoder:
    def __init__(self, weights: DecoderWeights, ffn: FFN | None = None,
                 observer: FFNObserver | None = None, linear: LinearFn | None = None,
                 fused: bool = True) -> None:
        self.w = weights
        self.kernels = decode_kernels(weights.device) if fused else None
        self.linear: LinearFn = linear if linear is not None else make_linear(
            "auto", weights.device)
        self.ffn: FFN = ffn if ffn is not None else DenseFFN(weights, linear=self.linear,
                                                             fused=fused)
        self.observer = observer
        self.scale = weights.head_dim ** -0.5
        self.rotary = (RotaryTable(weights.rope, weights.max_positions, weights.dtype,
                                   weights.device) if weights.rope is not None else None)

    @property
    def device(self) -> torch.device:
        return self.w.device

    def with_ffn(self, ffn: FFN) -> Decoder:
        """This decoder (weights, dense projections, fused operators, rotary table: shared,
        and a subclass's own settings) around another FFN, without an observer."""
        other = copy.copy(self)
        other.ffn, other.observer = ffn, None
        return other

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        w = self.w
        return KVCache.allocate(w.n_layers, batch, w.n_kv_heads, max_len, w.head_dim,
                                w.dtype, w.device)

    # ---- one forward over new tokens ----------------------------------------------------
    def forward(self, input_ids: Tensor, cache: KVCache, attention_mask: Tensor | None = None,
                last_only: bool = False, check_layers: bool = False) -> Tensor:
        """Run `input_ids` [B, T] after the cached tokens; returns logits [B, T|1, V].

        `attention_mask` [B, T] marks the new tokens that are real (left padding = 0).
        `check_layers`: raise NonFiniteError at the first decoder layer whose output holds
        NaN/inf (the diagnostic pass of `generate`'s guard).
        """
        w = self.w
        bsz, n_new = input_ids.shape
        start = cache.length
        if start + n_new > w.max_positions:  # positions never exceed the cache length
            raise ValueError(f"{start + n_new} tokens > max_positions {w.max_positions}")
        positions = cache.positions(n_new, attention_mask)
        mask = build_attention_mask(cache.key_valid, start, n_new, input_ids.device)

        h = F.embedding(input_ids, w.embed)
        if w.project_in is not None:
            h = self.linear(h, w.project_in)
        if w.pos_embed is not None:
            h = h + F.embedding(positions + w.pos_offset, w.pos_embed)
        rope = self.rotary.lookup(positions) if self.rotary is not None else None

        for i, layer in enumerate(w.layers):
            a = self._norm(h, layer.attn_norm) if w.pre_norm else h
            h = h + self._attention(i, a, layer.attn, cache, mask, rope)
            if not w.pre_norm:
                h = self._norm(h, layer.attn_norm)
            f = self._norm(h, layer.ffn_norm) if w.pre_norm else h
            y = self.ffn(i, f.reshape(bsz * n_new, -1), self.observer)
            h = h + y.view(bsz, n_new, -1)
            if not w.pre_norm:
                h = self._norm(h, layer.ffn_norm)
            if check_layers and not torch.isfinite(h).all():
                raise NonFiniteError(f"engine stage (our decoder): {nonfinite_kind(h)} in the "
                                     f"output of decoder layer {i}; the run stops here")
        cache.length = start + n_new

        if last_only:
            h = h[:, -1:]
        if w.final_norm is not None:
            h = self._norm(h, w.final_norm)
        if w.project_out is not None:
            h = self.linear(h, w.project_out)
        return self.linear(h, w.lm_head)

    def _norm(self, x: Tensor, w: NormWeights) -> Tensor:
        fused = self.kernels.rms_norm(x, w) if self.kernels is not None else None
        return fused if fused is not None else norm(x, w)

    def _attention(self, layer_idx: int, x: Tensor, a: AttentionWeights, cache: KVCache,
                   mask: Tensor | None, rope: tuple[Tensor, Tensor] | None) -> Tensor:
        w, linear = self.w, self.linear
        bsz, n_new, _ = x.shape
        heads = w.n_heads + w.n_kv_heads
        y = linear(x, *a.qkv())  # one product for Q, K and V
        if self.kernels is not None and n_new == 1 and mask is None:
            cos, sin = (t.reshape(bsz, w.head_dim) for t in rope) if rope else (None, None)
            out = self.kernels.attention_op(y, cos, sin, cache.k[layer_idx], cache.v[layer_idx],
                                            cache.length, w.n_heads, self.scale)
            return linear(out, a.wo, a.bo)
        # the rotary embedding on the Q and K heads together
        y = y.view(bsz, n_new, heads + w.n_kv_heads, w.head_dim)
        qk = y[:, :, :heads].transpose(1, 2)
        if rope is not None:
            qk = apply_rope(qk, *rope)
        q, k = qk[:, :w.n_heads], qk[:, w.n_heads:]
        v = y[:, :, heads:].transpose(1, 2)
        keys, values = cache.write(layer_idx, k, v)
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask,
            is_causal=mask is None and n_new > 1,  # only reached with start == 0
            scale=self.scale, enable_gqa=w.n_kv_heads != w.n_heads,
        )
        out = out.transpose(1, 2).reshape(bsz, n_new, w.n_heads * w.head_dim)
        return linear(out, a.wo, a.bo)

    # ---- generation --------------------------------------------------------------------
    def generate(self, input_ids: Tensor, max_new_tokens: int,
                 sampling: SamplingConfig | None = None, attention_mask: Tensor | None = None,
                 clock: StepClock | None = None, return_logits: bool = False) -> Generation:
        """Prefill `input_ids` [B, T], then generate exactly `max_new_tokens` per row.

        `clock` (if given) is started before prefill and marked after every new token.
        """
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        sampler = Sampler(sampling or SamplingConfig(), self.device)
        bsz, n_prompt = input_ids.shape
        input_ids = input_ids.to(self.device)
        if attention_mask is not None:
            attention_mask = attention_mask.to(self.device)
        tokens = torch.empty(bsz, max_new_tokens, dtype=torch.long, device=self.device)
        kept: list[Tensor] = []
        with torch.inference_mode():
            cache = self.new_cache(bsz, n_prompt + max_new_tokens)
            if clock is not None:
                clock.start()
            logits = self.forward(input_ids, cache, attention_mask, last_only=True)[:, -1]
            for step in range(max_new_tokens):
                if step:
                    logits = self.forward(tokens[:, step - 1:step], cache)[:, -1]
                tokens[:, step] = sampler(logits)
                if return_logits:
                    kept.append(logits.float())
                if clock is not None:
                    clock.mark()
            if not torch.isfinite(logits).all():  # NaN/inf persists through the KV cache
                self._locate_non_finite(input_ids, tokens[:, :-1], attention_mask)
        return Generation(tokens=tokens, logits=torch.stack(kept, 1) if return_logits else None)

    def _locate_non_finite(self, prompt: Tensor, generated: Tensor,
                           attention_mask: Tensor | None) -> None:
        """The generation's last logits were not finite: replay its tokens with a check after
        every layer, so the error names the first layer (else the LM head)."""
        ids = torch.cat([prompt, generated], dim=1)
        mask = (None if attention_mask is None else torch.cat(
            [attention_mask, torch.ones_like(generated)], dim=1))
        logits = self.forward(ids, self.new_cache(*ids.shape), mask, check_layers=True)
        raise NonFiniteError(f"engine stage (our decoder): {nonfinite_kind(logits)} in the "
                             "logits (LM head) while every decoder layer's output was finite; "
                             "the run stops here")
