// AVX-512 (F/BW/DQ/VL) vector helpers: 16 fp32 lanes, fp16 through vcvtph2ps/vcvtps2ph,
// bf16 through shifts. Included inside namespace pbops::isa_avx512 by cpu_isa_avx512.cpp,
// after `#pragma GCC target` (see there); the kernels are written against these names.
struct V {
  __m512 v;
};
constexpr int kW = 16;         // fp32 lanes
#ifndef PBOPS_ROW_GROUP
#define PBOPS_ROW_GROUP 4
#endif
constexpr int kRowGroup = PBOPS_ROW_GROUP;  // rows streamed together per thread (see sparse_cpu_kernels_impl.h)

inline V vzero() { return {_mm512_setzero_ps()}; }
inline V vset1(float a) { return {_mm512_set1_ps(a)}; }
inline V vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V vload(const simd::f16* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline V vload(const simd::bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline void vstore(float* p, V a) { _mm512_storeu_ps(p, a.v); }
inline void vstore(simd::f16* p, V a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void vstore(simd::bf16* p, V a) {  // round to nearest even; NaN stays a quiet NaN
  const __m512i u = _mm512_castps_si512(a.v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(
      r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}
inline V vadd(V a, V b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V vsub(V a, V b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V vmul(V a, V b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V vdiv(V a, V b) { return {_mm512_div_ps(a.v, b.v)}; }
inline V vfma(V a, V b, V c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a * b + c
// max(a, 0) with NaN -> 0 (the kernels' scalar `a > 0 ? a : 0`)
inline V vrelu(V a) { return {_mm512_max_ps(a.v, _mm512_setzero_ps())}; }
inline V vmin(V a, V b) { return {_mm512_min_ps(a.v, b.v)}; }
inline V vmax(V a, V b) { return {_mm512_max_ps(a.v, b.v)}; }
// where a > b (ordered): c, else d
inline V vselect_gt(V a, V b, V c, V d) {
  return {_mm512_mask_mov_ps(d.v, _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ), c.v)};
}
// where a < b (ordered): c, else d
inline V vselect_lt(V a, V b, V c, V d) {
  return {_mm512_mask_mov_ps(d.v, _mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ), c.v)};
}
// 2^n for integral n in [-126, 127]
inline V vpow2n(V n) {
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}
inline float vhsum(V a) { return _mm512_reduce_add_ps(a.v); }
// lane i = the sum of a[i]'s lanes, for i < kW (one transposing add tree for kW reductions)
inline V vsum_lanes(const V* a) {
  __m256 z[2];
  for (int g = 0; g < 2; ++g) {
    __m256 h[8];
    for (int i = 0; i < 8; ++i) {
      const __m512 v = a[8 * g + i].v;
      h[i] = _mm256_add_ps(_mm512_castps512_ps256(v),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    }
    const __m256 x0 = _mm256_hadd_ps(h[0], h[1]), x1 = _mm256_hadd_ps(h[2], h[3]);
    const __m256 x2 = _mm256_hadd_ps(h[4], h[5]), x3 = _mm256_hadd_ps(h[6], h[7]);
    const __m256 y0 = _mm256_hadd_ps(x0, x1), y1 = _mm256_hadd_ps(x2, x3);
    z[g] = _mm256_add_ps(_mm256_permute2f128_ps(y0, y1, 0x20),
                         _mm256_permute2f128_ps(y0, y1, 0x31));
  }
  return {_mm512_insertf32x8(_mm512_castps256_ps512(z[0]), z[1], 1)};
}
#ifndef PBOPS_PREFETCH_HINT
#define PBOPS_PREFETCH_HINT _MM_HINT_T1  // into L2: the loads that follow bring lines to L1
#endif
inline void prefetch_l2(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), PBOPS_PREFETCH_HINT);
}
#ifdef PBOPS_BF16_DOT
// AVX512-BF16 (the avx512_bf16 path only): 32 bf16 lanes and vdpbf16ps, which adds the
// products of each lane pair (2i, 2i+1) in fp32 into lane i of the accumulator (bf16
// subnormals read as zero, round to nearest even).
struct VB {
  __m512bh v;
};
constexpr int kWB = 32;  // bf16 lanes
inline VB vload_bf16(const simd::bf16* p) { return {(__m512bh)_mm512_loadu_si512(p)}; }
inline V vdot_bf16(V acc, VB a, VB b) { return {_mm512_dpbf16_ps(acc.v, a.v, b.v)}; }
// Both halves of a bf16 pair vector: lane 2i holds lo, lane 2i+1 hi (a 32-bit broadcast).
inline VB vpair_bf16(uint32_t pair) { return {(__m512bh)_mm512_set1_epi32(int(pair))}; }
// 32 columns of two bf16 rows as pairs (lane 2j: a[j], lane 2j+1: b[j]; b null: zeros):
// columns 0-15 to out, 16-31 to out + 32 (vpermt2w).
inline void vinterleave_bf16(const simd::bf16* a, const simd::bf16* b, simd::bf16* out) {
  // lane 2j: a[j] (index j), lane 2j + 1: b[j] (index 32 + j); + 16 for columns 16-31
  alignas(64) static constexpr uint16_t kPick[2][32] = {
      {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
      {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
  const __m512i lo = _mm512_load_si512(kPick[0]), hi = _mm512_load_si512(kPick[1]);
  const __m512i va = _mm512_loadu_si512(a);
  const __m512i vb = b ? _mm512_loadu_si512(b) : _mm512_setzero_si512();
  _mm512_storeu_si512(out, _mm512_permutex2var_epi16(va, lo, vb));
  _mm512_storeu_si512(out + kWB, _mm512_permutex2var_epi16(va, hi, vb));
}
#endif
