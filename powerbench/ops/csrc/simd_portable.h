// Portable vector helpers: 8 fp32 lanes as a plain array (the compiler vectorises the
// lane loops with whatever the baseline target has, SSE2 on x86-64), exact scalar fp16 and
// bf16 conversions. Included inside namespace pbops::isa_portable by cpu_isa_portable.cpp.
struct V {
  float v[8];
};
constexpr int kW = 8;          // fp32 lanes
constexpr int kRowGroup = 4;   // rows streamed together per thread (see sparse_cpu_kernels_impl.h)

#define PBOPS_LANES(expr) \
  V r;                    \
  for (int i = 0; i < kW; ++i) r.v[i] = (expr); \
  return r

inline V vzero() { PBOPS_LANES(0.0f); }
inline V vset1(float a) { PBOPS_LANES(a); }
template <typename T>
inline V vload(const T* p) { PBOPS_LANES(simd::to_f32(p[i])); }
template <typename T>
inline void vstore(T* p, V a) {
  for (int i = 0; i < kW; ++i) simd::store(p + i, a.v[i]);
}
inline V vadd(V a, V b) { PBOPS_LANES(a.v[i] + b.v[i]); }
inline V vsub(V a, V b) { PBOPS_LANES(a.v[i] - b.v[i]); }
inline V vmul(V a, V b) { PBOPS_LANES(a.v[i] * b.v[i]); }
inline V vdiv(V a, V b) { PBOPS_LANES(a.v[i] / b.v[i]); }
inline V vfma(V a, V b, V c) { PBOPS_LANES(a.v[i] * b.v[i] + c.v[i]); }  // a * b + c
inline V vrelu(V a) { PBOPS_LANES(a.v[i] > 0.0f ? a.v[i] : 0.0f); }
inline V vmin(V a, V b) { PBOPS_LANES(a.v[i] < b.v[i] ? a.v[i] : b.v[i]); }
inline V vmax(V a, V b) { PBOPS_LANES(a.v[i] > b.v[i] ? a.v[i] : b.v[i]); }
inline V vselect_gt(V a, V b, V c, V d) { PBOPS_LANES(a.v[i] > b.v[i] ? c.v[i] : d.v[i]); }
inline V vselect_lt(V a, V b, V c, V d) { PBOPS_LANES(a.v[i] < b.v[i] ? c.v[i] : d.v[i]); }
inline V vpow2n(V n) {  // 2^n for integral n in [-126, 127]
  PBOPS_LANES(simd::float_of(uint32_t(int32_t(n.v[i]) + 127) << 23));
}
#undef PBOPS_LANES
inline float vhsum(V a) {  // the AVX2 path's order: halves, then pairs
  float s[4];
  for (int i = 0; i < 4; ++i) s[i] = a.v[i] + a.v[i + 4];
  return (s[0] + s[1]) + (s[2] + s[3]);
}
// lane i = the sum of a[i]'s lanes, for i < kW
inline V vsum_lanes(const V* a) {
  V r;
  for (int i = 0; i < kW; ++i) r.v[i] = vhsum(a[i]);
  return r;
}
inline void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }
