// The body of one ISA path's translation unit (cpu_isa_<path>.cpp): that path's vector
// helpers, every kernel, and the entry points as a KernelTable. The including file has
// included the standard headers, opened `#pragma GCC target` and defined PBOPS_ISA (the
// namespace) and PBOPS_ISA_SIMD (the helpers' header). The standard headers are included
// before the target pragma, so the templates they define (std::vector, ...) are compiled
// for the baseline and may be shared between paths without running AVX-512 code by accident.
namespace pbops {
namespace PBOPS_ISA {
namespace {

#include PBOPS_ISA_SIMD
#include "sparse_cpu_kernels_impl.h"
#include "decode_cpu_kernels_impl.h"
#include "gather_probe_impl.h"

void row(WType wt, const void* w, int64_t K, const float* x, int64_t B, const int64_t* idx,
         int64_t n, const float* bias, bool relu, float* out, int64_t ldo, bool scatter,
         int threads) {
  simd::with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    row_impl(static_cast<const T*>(w), K, x, B, idx, n, bias, relu, out, ldo, scatter, threads);
  });
}

void axpy(WType wt, const void* w_t, int64_t D, const float* coeff, int64_t ldc, int64_t B,
          const int64_t* idx, int64_t n, float* out, int threads) {
  simd::with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    axpy_impl(static_cast<const T*>(w_t), D, coeff, ldc, B, idx, n, out, threads);
  });
}

void gated_hidden(WType wt, const void* w_gate, const void* w_up, int64_t K, const float* x,
                  int64_t B, const int64_t* idx, int64_t n, GatedKind kind, float* h,
                  int threads) {
  simd::with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    gated_impl(static_cast<const T*>(w_gate), static_cast<const T*>(w_up), K, x, B, idx, n,
               kind, h, threads);
  });
}

void dense(WType wt, const void* w, int64_t N, int64_t K, const float* x, int64_t B,
           const float* bias, WType ot, void* out, int64_t ldo, int threads) {
  simd::with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    dense_out(static_cast<const T*>(w), N, K, x, B, bias, ot, out, ldo, threads);
  });
}

void to_float(WType t, const void* src, int64_t n, float* dst) {
  simd::with_type(t, [&](auto tag) {
    using T = decltype(tag);
    to_float_impl(static_cast<const T*>(src), n, dst);
  });
}

void from_float(WType t, const float* src, int64_t n, void* dst) {
  simd::with_type(t, [&](auto tag) {
    using T = decltype(tag);
    from_float_impl(src, n, static_cast<T*>(dst));
  });
}

void rms_norm(WType t, const void* x, const void* weight, int64_t R, int64_t D, float eps,
              void* out) {
  simd::with_type(t, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_impl(static_cast<const T*>(x), static_cast<const T*>(weight), R, D, eps,
                  static_cast<T*>(out));
  });
}

void gated_activation(WType t, const void* y, int64_t R, int64_t N, GatedKind kind, void* h) {
  simd::with_type(t, [&](auto tag) {
    using T = decltype(tag);
    gated_act_impl(static_cast<const T*>(y), R, N, kind, static_cast<T*>(h));
  });
}

void decode_attention(WType t, const void* qkv, const void* cos, const void* sin,
                      void* k_cache, void* v_cache, int64_t B, int64_t H, int64_t KV,
                      int64_t hd, int64_t max_len, int64_t pos, float scale, void* out,
                      int threads) {
  simd::with_type(t, [&](auto tag) {
    using T = decltype(tag);
    attention_impl(static_cast<const T*>(qkv), static_cast<const T*>(cos),
                   static_cast<const T*>(sin), static_cast<T*>(k_cache),
                   static_cast<T*>(v_cache), B, H, KV, hd, max_len, pos, scale,
                   static_cast<T*>(out), threads);
  });
}

}  // namespace

const KernelTable kTable = {PBOPS_ISA_NAME, row, axpy, gated_hidden, dense, to_float,
                            from_float, activate_impl, read_sum_impl, gather_probe_impl,
                            rms_norm, gated_activation,
                            decode_attention};

}  // namespace PBOPS_ISA
}  // namespace pbops
