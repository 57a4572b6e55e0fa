// Fused decode-step kernels (see decode_cpu_kernels.h). Compiled like the sparse kernels
// (-mavx2 -mfma -mf16c); hd and D need not be multiples of 8 (scalar tails).
#include "decode_cpu_kernels.h"

#include <cmath>
#include <vector>

#include "cpu_simd.h"
#include "thread_pool.h"

namespace pbops {
namespace {

using namespace simd;  // NOLINT: f16, bf16, load8, to_f32, hsum, store

// Below this many multiply-adds (heads x keys x head_dim) attention runs on the caller.
constexpr int64_t kAttentionParallelMin = int64_t(1) << 16;

template <typename T>
inline float round_to(float v) {  // v rounded to T and back (what a torch op in T returns)
  T t;
  store(&t, v);
  return to_f32(t);
}

template <typename T>
float dot(const T* a, const float* q, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(q + i), acc0);
    acc1 = _mm256_fmadd_ps(load8(a + i + 8), _mm256_loadu_ps(q + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(q + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += to_f32(a[i]) * q[i];
  return s;
}

template <typename T>
void add_scaled(const T* v, float p, float* acc, int64_t n) {  // acc += p * v
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(load8(v + i), pv, _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += p * to_f32(v[i]);
}

// dst = T(T(x * cos) + T(rotate_half(x) * sin)): HF's apply_rotary_pos_emb in T, operator
// by operator (each torch op rounds to T), so fp16 keys and queries match the reference.
template <typename T>
void rope(const T* x, const T* cos, const T* sin, int64_t hd, float* dst) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < hd; ++i) {
    const float rot = i < half ? -to_f32(x[i + half]) : to_f32(x[i - half]);
    const float a = round_to<T>(to_f32(x[i]) * to_f32(cos[i]));
    const float b = round_to<T>(rot * to_f32(sin[i]));
    dst[i] = round_to<T>(a + b);
  }
}

template <typename T>
void rms_norm_impl(const T* x, const T* w, int64_t R, int64_t D, float eps, T* out) {
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * D;
    T* o = out + r * D;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= D; i += 8) {
      const __m256 v = load8(xr + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    float ss = hsum(acc);
    for (; i < D; ++i) ss += to_f32(xr[i]) * to_f32(xr[i]);
    const float inv = 1.0f / std::sqrt(ss / float(D) + eps);
    for (int64_t k = 0; k < D; ++k) {
      const float n = round_to<T>(to_f32(xr[k]) * inv);  // normalised, in the input's type
      store(o + k, w ? n * to_f32(w[k]) : n);
    }
  }
}

template <typename T>
void gated_impl(const T* y, int64_t R, int64_t N, GatedKind kind, T* h) {
  for (int64_t r = 0; r < R; ++r) {
    const T* g = y + r * 2 * N;
    const T* u = g + N;
    T* o = h + r * N;
    for (int64_t j = 0; j < N; ++j) {
      const float gv = to_f32(g[j]);
      float uv = to_f32(u[j]);
      float a;
      if (kind == kSwiGLU) {
        a = round_to<T>(gv / (1.0f + std::exp(-gv)));
      } else {
        a = gv > 0.0f ? gv : 0.0f;
        if (kind == kDReLU) uv = uv > 0.0f ? uv : 0.0f;
      }
      store(o + j, a * uv);
    }
  }
}

template <typename T>
void attention_impl(const T* qkv, const T* cos, const T* sin, T* kc, T* vc, int64_t B,
                    int64_t H, int64_t KV, int64_t hd, int64_t max_len, int64_t pos, float scale,
                    T* out, int nt) {
  const int64_t width = (H + 2 * KV) * hd;
  const int64_t group = H / KV;
  std::vector<float> tmp(static_cast<size_t>(hd));
  // 1. the new token's K (rotated) and V into the cache, at row `pos`
  for (int64_t b = 0; b < B; ++b) {
    const T* row = qkv + b * width;
    for (int64_t g = 0; g < KV; ++g) {
      const T* k = row + (H + g) * hd;
      const T* v = row + (H + KV + g) * hd;
      T* kd = kc + ((b * KV + g) * max_len + pos) * hd;
      T* vd = vc + ((b * KV + g) * max_len + pos) * hd;
      if (cos != nullptr) {
        rope(k, cos + b * hd, sin + b * hd, hd, tmp.data());
        for (int64_t i = 0; i < hd; ++i) store(kd + i, tmp[i]);
      } else {
        for (int64_t i = 0; i < hd; ++i) kd[i] = k[i];
      }
      for (int64_t i = 0; i < hd; ++i) vd[i] = v[i];
    }
  }
  // 2. every (row, query head): scores over keys 0..pos, softmax, weighted sum of values
  const int64_t keys = pos + 1;
  const bool par = nt > 1 && B * H * keys * hd >= kAttentionParallelMin;
  parallel_for(B * H, 1, par ? nt : 1, [&](int64_t i0, int64_t i1, int) {
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < keys + 2 * hd) buf.resize(keys + 2 * hd);
    float* scores = buf.data();
    float* q = scores + keys;
    float* acc = q + hd;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / H, h = i % H;
      const T* qh = qkv + b * width + h * hd;
      if (cos != nullptr) {
        rope(qh, cos + b * hd, sin + b * hd, hd, q);
      } else {
        for (int64_t d = 0; d < hd; ++d) q[d] = to_f32(qh[d]);
      }
      const int64_t kvh = b * KV + h / group;
      const T* kb = kc + kvh * max_len * hd;
      const T* vb = vc + kvh * max_len * hd;
      float mx = -INFINITY;
      for (int64_t t = 0; t < keys; ++t) {
        scores[t] = dot(kb + t * hd, q, hd) * scale;
        mx = scores[t] > mx ? scores[t] : mx;
      }
      float sum = 0.0f;
      for (int64_t t = 0; t < keys; ++t) {
        scores[t] = std::exp(scores[t] - mx);
        sum += scores[t];
      }
      for (int64_t d = 0; d < hd; ++d) acc[d] = 0.0f;
      for (int64_t t = 0; t < keys; ++t) add_scaled(vb + t * hd, scores[t], acc, hd);
      const float inv = 1.0f / sum;
      T* o = out + b * H * hd + h * hd;
      for (int64_t d = 0; d < hd; ++d) store(o + d, acc[d] * inv);
    }
  });
}

}  // namespace

void rms_norm(WType t, const void* x, const void* weight, int64_t R, int64_t D, float eps,
              void* out) {
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_impl(static_cast<const T*>(x), static_cast<const T*>(weight), R, D, eps,
                  static_cast<T*>(out));
  });
}

void gated_activation(WType t, const void* y, int64_t R, int64_t N, GatedKind kind, void* h) {
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    gated_impl(static_cast<const T*>(y), R, N, kind, static_cast<T*>(h));
  });
}

void decode_attention(WType t, const void* qkv, const void* cos, const void* sin,
                      void* k_cache, void* v_cache, int64_t B, int64_t H, int64_t KV,
                      int64_t hd, int64_t max_len, int64_t pos, float scale, void* out,
                      int threads) {
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    attention_impl(static_cast<const T*>(qkv), static_cast<const T*>(cos),
                   static_cast<const T*>(sin), static_cast<T*>(k_cache), static_cast<T*>(v_cache),
                   B, H, KV, hd, max_len, pos, scale, static_cast<T*>(out), threads);
  });
}

}  // namespace pbops
