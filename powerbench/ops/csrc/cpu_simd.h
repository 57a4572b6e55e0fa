// Element types of the CPU kernels (fp32, IEEE fp16, bf16), their exact scalar conversions
// (plain C++, identical on every ISA path) and the one dtype switch of the entry points.
// The vector helpers of each ISA path are in simd_avx512.h, simd_avx2.h, simd_portable.h.
#pragma once

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

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float to_f32(float v) { return v; }
inline float to_f32(f16 h) {  // exact: every half is a float
  const uint32_t sign = uint32_t(h.v & 0x8000u) << 16;
  const uint32_t exp = (h.v >> 10) & 0x1fu, mant = h.v & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float m = float(mant) * 5.9604644775390625e-8f;
    return float_of(sign | bits_of(m));
  }
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}
inline float to_f32(bf16 v) { return float_of(uint32_t(v.v) << 16); }

inline void store(float* p, float v) { *p = v; }
inline void store(f16* p, float v) {  // round to nearest even, as vcvtps2ph does
  uint32_t x = bits_of(v);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint32_t o;
  if (x >= 0x47800000u) {  // >= 65536 (rounds to inf), inf or NaN
    o = x > 0x7f800000u ? 0x7e00u | ((x >> 13) & 0x3ffu) : 0x7c00u;
  } else if (x < 0x38800000u) {  // below the smallest normal half: exact float rounding
    const uint32_t magic = uint32_t(127 - 15 + 23 - 10 + 1) << 23;
    o = bits_of(float_of(x) + float_of(magic)) - magic;
  } else {
    x += (uint32_t(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1u);
    o = x >> 13;  // a carry into the exponent gives the next binade or inf: correct
  }
  p->v = uint16_t(o | sign);
}
inline void store(bf16* p, float v) {
  const uint32_t u = bits_of(v);
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
