// The public CPU kernel entry points (sparse_cpu_kernels.h, decode_cpu_kernels.h): each
// calls the chosen ISA path's compiled kernel (cpu_isa.h). Chosen at load: the best path
// CPUID reports (with the OS's register-state support, which __builtin_cpu_supports checks),
// until set_isa picks another.
#include <atomic>
#include <cstring>

#include "cpu_isa.h"
#include "thread_pool.h"

namespace pbops {
namespace {

bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool has_avx512_bf16() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }
bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

struct Supported {
  const KernelTable* tables[4];
  const char* names[4];
  int count = 0;
  Supported() {
    __builtin_cpu_init();
    if (has_avx512_bf16() && has_avx2()) add(avx512_bf16_kernels());
    if (has_avx512() && has_avx2()) add(avx512_kernels());
    if (has_avx2()) add(avx2_kernels());
    add(portable_kernels());
  }
  void add(const KernelTable& t) {
    tables[count] = &t;
    names[count++] = t.name;
  }
};

const Supported& supported() {
  static const Supported s;
  return s;
}

std::atomic<const KernelTable*>& active_slot() {
  static std::atomic<const KernelTable*> slot{supported().tables[0]};
  return slot;
}

inline const KernelTable& active() { return *active_slot().load(std::memory_order_acquire); }

}  // namespace

const char* const* supported_isas(int* count) {
  *count = supported().count;
  return supported().names;
}

const char* current_isa() { return active().name; }

bool set_isa(const char* name) {
  const Supported& s = supported();
  for (int i = 0; i < s.count; ++i) {
    if (std::strcmp(s.names[i], name) == 0) {
      active_slot().store(s.tables[i], std::memory_order_release);
      return true;
    }
  }
  return false;
}

void row(WType wt, const void* w, int64_t K, const float* x, int64_t B, const int64_t* idx,
         int64_t n, const float* bias, bool relu, float* out, int64_t ldo, bool scatter,
         int threads) {
  active().row_fn(wt, w, K, x, B, idx, n, bias, relu, out, ldo, scatter, threads);
}

void axpy(WType wt, const void* w_t, int64_t D, const float* coeff, int64_t ldc, int64_t B,
          const int64_t* idx, int64_t n, float* out, int threads) {
  active().axpy_fn(wt, w_t, D, coeff, ldc, B, idx, n, out, threads);
}

void gated_hidden(WType wt, const void* w_gate, const void* w_up, int64_t K, const float* x,
                  int64_t B, const int64_t* idx, int64_t n, GatedKind kind, float* h,
                  int threads) {
  active().gated_hidden_fn(wt, w_gate, w_up, K, x, B, idx, n, kind, h, threads);
}

void dense(WType wt, const void* w, int64_t N, int64_t K, const float* x, int64_t B,
           const float* bias, WType ot, void* out, int64_t ldo, int threads) {
  active().dense_fn(wt, w, N, K, x, B, bias, ot, out, ldo, threads);
}

void to_float(WType t, const void* src, int64_t n, float* dst) {
  active().to_float_fn(t, src, n, dst);
}

void from_float(WType t, const float* src, int64_t n, void* dst) {
  active().from_float_fn(t, src, n, dst);
}

void activate(float* a, int64_t n, GatedKind kind) { active().activate_fn(a, n, kind); }

double read_sum(const float* buf, int64_t n, int threads) {
  return active().read_sum_fn(buf, n, threads);
}

uint32_t gather_probe(const void* w, int64_t row_len, int64_t elem_bytes, const int64_t* idx,
                      int64_t n, int mode, int threads) {
  return active().gather_probe_fn(w, row_len, elem_bytes, idx, n, mode, threads);
}

int threads_used(int threads) { return probe_workers(threads, 200, 500); }

void rms_norm(WType t, const void* x, const void* weight, int64_t R, int64_t D, float eps,
              void* out) {
  active().rms_norm_fn(t, x, weight, R, D, eps, out);
}

void gated_activation(WType t, const void* y, int64_t R, int64_t N, GatedKind kind, void* h) {
  active().gated_activation_fn(t, y, R, N, kind, h);
}

void decode_attention(WType t, const void* qkv, const void* cos, const void* sin,
                      void* k_cache, void* v_cache, int64_t B, int64_t H, int64_t KV,
                      int64_t hd, int64_t max_len, int64_t pos, float scale, void* out,
                      int threads) {
  active().decode_attention_fn(t, qkv, cos, sin, k_cache, v_cache, B, H, KV, hd, max_len, pos,
                            scale, out, threads);
}

}  // namespace pbops
