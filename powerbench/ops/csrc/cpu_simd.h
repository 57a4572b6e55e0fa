// Element types and AVX2/F16C helpers shared by the CPU kernels (fp32, IEEE fp16, bf16).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "sparse_cpu_kernels.h"  // WType

namespace pbops {
namespace simd {

struct f16 {
  uint16_t v;
};
struct bf16 {
  uint16_t v;
};

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const f16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float to_f32(float v) { return v; }
inline float to_f32(f16 v) { return _cvtsh_ss(v.v); }
inline float to_f32(bf16 v) {
  const uint32_t u = uint32_t(v.v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 sh = _mm_movehdup_ps(lo);
  lo = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, lo);
  return _mm_cvtss_f32(_mm_add_ss(lo, sh));
}

inline void store(float* p, float v) { *p = v; }
inline void store(f16* p, float v) { p->v = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }
inline void store(bf16* p, float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
    p->v = uint16_t((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
  } else {
    p->v = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
  }
}

// f(T{}) with T the element type `t` names (float, f16 or bf16): the one dtype switch of
// every kernel entry point, e.g. with_type(t, [&](auto tag) { using T = decltype(tag); ... }).
template <typename F>
inline void with_type(WType t, F&& f) {
  switch (t) {
    case kF32: f(float{}); break;
    case kF16: f(f16{}); break;
    case kBF16: f(bf16{}); break;
  }
}

}  // namespace simd
}  // namespace pbops
