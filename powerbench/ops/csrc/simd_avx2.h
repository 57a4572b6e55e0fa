// AVX2/FMA/F16C vector helpers: 8 fp32 lanes, fp16 through vcvtph2ps/vcvtps2ph, bf16 through
// shifts. Included inside namespace pbops::isa_avx2 by cpu_isa_avx2.cpp, after
// `#pragma GCC target` (see there); the kernels are written against these names.
struct V {
  __m256 v;
};
constexpr int kW = 8;          // fp32 lanes
constexpr int kRowGroup = 4;   // rows streamed together per thread (see sparse_cpu_kernels_impl.h)

inline V vzero() { return {_mm256_setzero_ps()}; }
inline V vset1(float a) { return {_mm256_set1_ps(a)}; }
inline V vload(const float* p) { return {_mm256_loadu_ps(p)}; }
inline V vload(const simd::f16* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline V vload(const simd::bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))};
}
inline void vstore(float* p, V a) { _mm256_storeu_ps(p, a.v); }
inline void vstore(simd::f16* p, V a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void vstore(simd::bf16* p, V a) {  // round to nearest even; NaN stays a quiet NaN
  const __m256i u = _mm256_castps_si256(a.v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(
      r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
  // pack the 32-bit lanes' low halves: (r0..r3 | r4..r7) -> 8 x u16
  const __m256i packed = _mm256_packus_epi32(r, r);  // values fit in 16 bits: no saturation
  const __m256i ordered = _mm256_permute4x64_epi64(packed, 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(ordered));
}
inline V vadd(V a, V b) { return {_mm256_add_ps(a.v, b.v)}; }
inline V vsub(V a, V b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline V vmul(V a, V b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline V vdiv(V a, V b) { return {_mm256_div_ps(a.v, b.v)}; }
inline V vfma(V a, V b, V c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }  // a * b + c
// max(a, 0) with NaN -> 0 (the kernels' scalar `a > 0 ? a : 0`)
inline V vrelu(V a) { return {_mm256_max_ps(a.v, _mm256_setzero_ps())}; }
inline V vmin(V a, V b) { return {_mm256_min_ps(a.v, b.v)}; }
inline V vmax(V a, V b) { return {_mm256_max_ps(a.v, b.v)}; }
inline V vselect_gt(V a, V b, V c, V d) {  // where a > b (ordered): c, else d
  return {_mm256_blendv_ps(d.v, c.v, _mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ))};
}
inline V vselect_lt(V a, V b, V c, V d) {  // where a < b (ordered): c, else d
  return {_mm256_blendv_ps(d.v, c.v, _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ))};
}
inline V vpow2n(V n) {  // 2^n for integral n in [-126, 127]
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}
inline float vhsum(V a) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  __m128 sh = _mm_movehdup_ps(lo);
  lo = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, lo);
  return _mm_cvtss_f32(_mm_add_ss(lo, sh));
}
// lane i = the sum of a[i]'s lanes, for i < kW (one transposing add tree for kW reductions)
inline V vsum_lanes(const V* a) {
  const __m256 x0 = _mm256_hadd_ps(a[0].v, a[1].v), x1 = _mm256_hadd_ps(a[2].v, a[3].v);
  const __m256 x2 = _mm256_hadd_ps(a[4].v, a[5].v), x3 = _mm256_hadd_ps(a[6].v, a[7].v);
  const __m256 y0 = _mm256_hadd_ps(x0, x1), y1 = _mm256_hadd_ps(x2, x3);
  return {_mm256_add_ps(_mm256_permute2f128_ps(y0, y1, 0x20),
                        _mm256_permute2f128_ps(y0, y1, 0x31))};
}
#ifndef PBOPS_PREFETCH_HINT
#define PBOPS_PREFETCH_HINT _MM_HINT_T1  // into L2: the loads that follow bring lines to L1
#endif
inline void prefetch_l2(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), PBOPS_PREFETCH_HINT);
}
