// Fused CPU kernels for one decode step (one new token per row), raw pointers, no torch
// headers: the operator chains that cost more in dispatch than in arithmetic at decode.
//
// Tensors are row-major; T is the model's dtype (fp32, fp16 or bf16) throughout and every
// sum is accumulated in fp32. Rounding to T happens where the equivalent torch operators
// (and HF) round, so fp32 results agree to accumulation order and fp16/bf16 ones to an ulp.
#pragma once

#include <cstdint>

#include "sparse_cpu_kernels.h"

namespace pbops {

// out[r] = weight * T(x[r] / sqrt(mean(x[r]^2) + eps)) for R rows of D (LLaMA/HF RMSNorm:
// normalised in fp32, rounded to T, then scaled by `weight` [D] in T; weight may be null).
void rms_norm(WType t, const void* x, const void* weight, int64_t R, int64_t D, float eps,
              void* out);

// h[r, j] = act(gate) * f(up) for R rows of y = [gate | up] ([R, 2 N], the stacked gate/up
// product), in T with torch's roundings (act(gate) rounded, then the product): ReGLU
// relu(g) u, dReLU relu(g) relu(u), SwiGLU silu(g) u.
void gated_activation(WType t, const void* y, int64_t R, int64_t N, GatedKind kind, void* h);

// Attention of one new token per row over a KV cache, after the stacked Q/K/V product.
//   qkv [B, (H + 2 KV) hd]: the new token's Q heads, then K heads, then V heads;
//   cos, sin [B, hd] (rotary tables at each row's position, HF rotate-half) or null;
//   k_cache, v_cache [B, KV, max_len, hd]: the rotated K and the V of the new token are
//   written at row `pos`, then query head h attends to rows 0..pos of KV head h / (H / KV);
//   out [B, H hd]: softmax(q . k * scale) . v per head.
void decode_attention(WType t, const void* qkv, const void* cos, const void* sin,
                      void* k_cache, void* v_cache, int64_t B, int64_t H, int64_t KV,
                      int64_t hd, int64_t max_len, int64_t pos, float scale, void* out,
                      int threads);

}  // namespace pbops
