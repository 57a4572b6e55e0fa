// AVX2/FMA/F16C implementation of the neuron-aware sparse kernels (see sparse_cpu_kernels.h).
// Compiled with -mavx2 -mfma -mf16c; the Python side only loads it on a CPU that has them.
#include "sparse_cpu_kernels.h"
#include "cpu_simd.h"
#include "thread_pool.h"

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace pbops {
namespace {

using namespace simd;  // NOLINT: f16, bf16, load8, to_f32, hsum, store

// Work below this many multiply-adds runs on one thread (a parallel region costs microseconds).
constexpr int64_t kParallelMin = int64_t(1) << 15;
// Columns per chunk when a weight chunk is reused for several tokens (axpy, batch > 1).
constexpr int64_t kChunk = 256;
// Weight bytes per dynamically scheduled work item: large enough to amortise the shared
// counter, small enough that a thread the OS preempts (the machine is shared) does not
// hold back the others as a static split would.
constexpr int64_t kGrabBytes = int64_t(128) << 10;

inline int64_t rows_per_grab(int64_t row_bytes) {
  const int64_t r = kGrabBytes / (row_bytes > 0 ? row_bytes : 1);
  return r < 1 ? 1 : r;
}

// Per-thread scratch that survives across calls (pool threads are persistent); `slot`
// selects one of a few independent buffers.
void* thread_scratch(int slot, size_t bytes) {
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
    ~Buf() { std::free(p); }
  };
  static thread_local Buf bufs[4];
  Buf& b = bufs[slot];
  if (b.cap < bytes) {
    std::free(b.p);
    b.cap = (bytes + 63) / 64 * 64;
    b.p = std::aligned_alloc(64, b.cap);
  }
  return b.p;
}

constexpr int kRowGroup = 4;  // rows computed together (concurrent streams, shared x loads)

// Byte pointers to the rows of the group computed next. While a group is read, the same
// offsets of the next group's rows are prefetched into L2, so about twice as many cache-line
// requests are in flight as the loads alone would keep (one thread's demand loads cannot
// cover DRAM latency, notably on a cold start of a sparse, scattered set of rows).
struct NextRows {
  const char* p[kRowGroup];
  template <typename WT>
  NextRows(const WT* base, int64_t row_len, const int64_t* ids, int64_t count,
           const WT* const* fallback, int fallback_count) {
    for (int q = 0; q < kRowGroup; ++q) {
      const WT* row = q < count ? base + ids[q] * row_len
                                : fallback[q < fallback_count ? q : fallback_count - 1];
      p[q] = reinterpret_cast<const char*>(row);
    }
  }
  // explicit rows (dense: the next rows of the matrix)
  template <typename WT>
  explicit NextRows(const WT* const* rows) {
    for (int q = 0; q < kRowGroup; ++q) p[q] = reinterpret_cast<const char*>(rows[q]);
  }
  inline void at(int64_t byte_offset) const {
    for (int q = 0; q < kRowGroup; ++q) _mm_prefetch(p[q] + byte_offset, _MM_HINT_T1);
  }
  inline void range(int64_t begin, int64_t end) const {
    for (int64_t off = begin; off < end; off += 64) at(off);
  }
};

// R rows . one token: R concurrent memory streams per thread, two accumulators per row.
template <typename WT, int R>
inline void dot_rows(const WT* const* w, const float* x, int64_t K, float* res,
                     const NextRows& next) {
  __m256 a[R][2];
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    next.at(k * int64_t(sizeof(WT)));
    const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
    for (int r = 0; r < R; ++r) {
      a[r][0] = _mm256_fmadd_ps(load8(w[r] + k), x0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(load8(w[r] + k + 8), x1, a[r][1]);
    }
  }
  if (k + 8 <= K) {
    const __m256 x0 = _mm256_loadu_ps(x + k);
    for (int r = 0; r < R; ++r) a[r][0] = _mm256_fmadd_ps(load8(w[r] + k), x0, a[r][0]);
    k += 8;
  }
  for (int r = 0; r < R; ++r) {
    float s = hsum(_mm256_add_ps(a[r][0], a[r][1]));
    for (int64_t kk = k; kk < K; ++kk) s += to_f32(w[r][kk]) * x[kk];
    res[r] = s;
  }
}

// R fp32 rows . T tokens over len (a multiple of 8) elements, accumulating into acc: each
// weight vector is loaded once for T tokens and each x vector once for R rows.
template <int R, int T>
inline void tile_rt(const float* const* w, const float* x, int64_t ldx, int64_t len,
                    __m256* acc /*[R][T]*/) {
  __m256 a[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) a[r][t] = acc[r * T + t];
  for (int64_t k = 0; k < len; k += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w[r] + k);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * ldx + k);
      for (int r = 0; r < R; ++r) a[r][t] = _mm256_fmadd_ps(wv[r], xv, a[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r * T + t] = a[r][t];
}

constexpr int64_t kMaxBlock = 512;  // K elements per block in the batched row kernel

// res[r * B + b] = w[r] . x[b] for R rows and B > 1 tokens. K is cut into blocks whose x
// slice for all tokens stays in L1; a block of fp16/bf16 rows is converted to fp32 once
// (into `wbuf`, R x kMaxBlock floats) and reused by every token; inside a block tokens go
// in pairs (R x 2 tile, up to eight accumulators). `part` holds R * B vector partial sums.
template <typename WT, int R>
inline void dot_rows_tokens(const WT* const* w, const float* x, int64_t K, int64_t B,
                            float* res, __m256* part, float* wbuf, const NextRows& next) {
  for (int64_t i = 0; i < R * B; ++i) part[i] = _mm256_setzero_ps();
  const int64_t K8 = K / 8 * 8;
  int64_t kb = (int64_t(4096) / B) / 8 * 8;  // 16 KiB of x per block
  kb = kb < 64 ? 64 : (kb > kMaxBlock ? kMaxBlock : kb);
  __m256 acc[R * 2];
  const float* wr[R];
  for (int64_t k0 = 0; k0 < K8; k0 += kb) {
    const int64_t len = k0 + kb < K8 ? kb : K8 - k0;
    next.range(k0 * int64_t(sizeof(WT)), (k0 + len) * int64_t(sizeof(WT)));
    for (int r = 0; r < R; ++r) {
      if constexpr (sizeof(WT) == sizeof(float)) {
        wr[r] = reinterpret_cast<const float*>(w[r]) + k0;
      } else {
        float* dst = wbuf + r * kMaxBlock;
        for (int64_t k = 0; k < len; k += 8) _mm256_storeu_ps(dst + k, load8(w[r] + k0 + k));
        wr[r] = dst;
      }
    }
    int64_t t0 = 0;
    for (; t0 + 2 <= B; t0 += 2) {
      for (int r = 0; r < R; ++r) {
        acc[r * 2] = part[r * B + t0];
        acc[r * 2 + 1] = part[r * B + t0 + 1];
      }
      tile_rt<R, 2>(wr, x + t0 * K + k0, K, len, acc);
      for (int r = 0; r < R; ++r) {
        part[r * B + t0] = acc[r * 2];
        part[r * B + t0 + 1] = acc[r * 2 + 1];
      }
    }
    if (t0 < B) {
      for (int r = 0; r < R; ++r) acc[r] = part[r * B + t0];
      tile_rt<R, 1>(wr, x + t0 * K + k0, K, len, acc);
      for (int r = 0; r < R; ++r) part[r * B + t0] = acc[r];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      float sum = hsum(part[r * B + b]);
      for (int64_t k = K8; k < K; ++k) sum += to_f32(w[r][k]) * x[b * K + k];
      res[r * B + b] = sum;
    }
  }
}

// res[q * B + b] = rows[q] . x[b] for q < count <= kRowGroup.
template <typename WT>
inline void dot_group(const WT* const* rows, int count, const float* x, int64_t K, int64_t B,
                      float* res, __m256* part, float* wbuf, const NextRows& next) {
  if (B == 1) {
    switch (count) {
      case 4: dot_rows<WT, 4>(rows, x, K, res, next); break;
      case 3: dot_rows<WT, 3>(rows, x, K, res, next); break;
      case 2: dot_rows<WT, 2>(rows, x, K, res, next); break;
      case 1: dot_rows<WT, 1>(rows, x, K, res, next); break;
      default: break;
    }
    return;
  }
  switch (count) {
    case 4: dot_rows_tokens<WT, 4>(rows, x, K, B, res, part, wbuf, next); break;
    case 3: dot_rows_tokens<WT, 3>(rows, x, K, B, res, part, wbuf, next); break;
    case 2: dot_rows_tokens<WT, 2>(rows, x, K, B, res, part, wbuf, next); break;
    case 1: dot_rows_tokens<WT, 1>(rows, x, K, B, res, part, wbuf, next); break;
    default: break;
  }
}

// Per-thread buffers of the row kernels: results [kRowGroup][B] twice, vector partials.
struct GroupScratch {
  float* res;
  float* res2;
  __m256* part;
  float* wbuf;
  explicit GroupScratch(int64_t B) {
    res = static_cast<float*>(thread_scratch(0, sizeof(float) * 2 * kRowGroup * B));
    res2 = res + kRowGroup * B;
    part = static_cast<__m256*>(thread_scratch(1, sizeof(__m256) * kRowGroup * B));
    wbuf = static_cast<float*>(thread_scratch(3, sizeof(float) * kRowGroup * kMaxBlock));
  }
};

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

inline float gated_value(GatedKind kind, float g, float u) {
  if (kind == kReGLU) return g > 0.0f ? g * u : 0.0f;
  if (kind == kDReLU) return (g > 0.0f && u > 0.0f) ? g * u : 0.0f;
  return silu(g) * u;
}

template <typename WT>
void row_impl(const WT* w, int64_t K, const float* x, int64_t B, const int64_t* idx, int64_t n,
              const float* bias, bool relu, float* out, int64_t ldo, bool scatter, int nt) {
  const bool par = n * K * B >= kParallelMin && nt > 1;
  const int64_t groups = (n + kRowGroup - 1) / kRowGroup;
  const int64_t grab = rows_per_grab(kRowGroup * K * int64_t(sizeof(WT)));
  parallel_for(groups, grab, par ? nt : 1, [&](int64_t g0, int64_t g1, int) {
    GroupScratch sc(B);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t j0 = g * kRowGroup;
      const int count = int(n - j0 < kRowGroup ? n - j0 : kRowGroup);
      const WT* rows[kRowGroup];
      for (int q = 0; q < count; ++q) rows[q] = w + idx[j0 + q] * K;
      const int64_t nj = j0 + kRowGroup;
      const NextRows next(w, K, idx + nj, nj < n ? n - nj : 0, rows, count);
      dot_group(rows, count, x, K, B, sc.res, sc.part, sc.wbuf, next);
      for (int q = 0; q < count; ++q) {
        const int64_t r = idx[j0 + q];
        const float bb = bias ? bias[r] : 0.0f;
        const int64_t col = scatter ? r : j0 + q;
        for (int64_t b = 0; b < B; ++b) {
          const float v = sc.res[q * B + b] + bb;
          out[b * ldo + col] = (relu && !(v > 0.0f)) ? 0.0f : v;
        }
      }
    }
  });
}

constexpr int64_t kDenseAhead = 1024;  // prefetch distance of the dense kernel (bytes)

// Every row of W, in order: groups of kRowGroup consecutive rows (kRowGroup concurrent
// streams, x loaded once per group), each stream prefetched kDenseAhead bytes ahead; work
// claimed dynamically in ~kGrabBytes chunks of groups (see rows_per_grab).
template <typename WT, typename OT>
void dense_impl(const WT* w, int64_t N, int64_t K, const float* x, int64_t B, const float* bias,
                OT* out, int64_t ldo, int nt) {
  const bool par = N * K * B >= kParallelMin && nt > 1;
  const int64_t groups = (N + kRowGroup - 1) / kRowGroup;
  const int64_t grab = rows_per_grab(kRowGroup * K * int64_t(sizeof(WT)));
  const bool short_rows = K * int64_t(sizeof(WT)) < 4 * kDenseAhead;  // rows under 4 KB
  parallel_for(groups, grab, par ? nt : 1, [&](int64_t g0, int64_t g1, int) {
    GroupScratch sc(B);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t j0 = g * kRowGroup;
      const int count = int(N - j0 < kRowGroup ? N - j0 : kRowGroup);
      const WT* rows[kRowGroup];
      for (int q = 0; q < count; ++q) rows[q] = w + (j0 + q) * K;
      // Long rows: prefetch kDenseAhead bytes ahead in each row's own stream (measured
      // 8-20% faster with 2 threads than the next group's rows, 4096-wide rows). Rows under
      // 4 KB (e.g. 576-wide): the next group's rows, as the sparse kernels do (1 KB ahead
      // lands inside this group's own rows: measured 25-35% slower for 576-wide fp16 with
      // 1 thread). A prefetch never faults.
      const WT* ahead[kRowGroup];
      for (int q = 0; q < kRowGroup; ++q) {
        const WT* own = rows[q < count ? q : count - 1];
        if (short_rows) {
          const int64_t r = j0 + kRowGroup + q;
          ahead[q] = (g + 1 < g1 && r < N) ? w + r * K : own;
        } else {
          ahead[q] = own + kDenseAhead / int64_t(sizeof(WT));
        }
      }
      const NextRows next(ahead);
      dot_group(rows, count, x, K, B, sc.res, sc.part, sc.wbuf, next);
      for (int q = 0; q < count; ++q) {
        const float bb = bias ? bias[j0 + q] : 0.0f;
        for (int64_t b = 0; b < B; ++b) store(out + b * ldo + j0 + q, sc.res[q * B + b] + bb);
      }
    }
  });
}

template <typename WT>
void dense_out(const WT* w, int64_t N, int64_t K, const float* x, int64_t B, const float* bias,
               WType ot, void* out, int64_t ldo, int nt) {
  with_type(ot, [&](auto tag) {
    using OT = decltype(tag);
    dense_impl(w, N, K, x, B, bias, static_cast<OT*>(out), ldo, nt);
  });
}

template <typename T>
void to_float_impl(const T* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(src + i));
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

template <typename WT>
void gated_impl(const WT* wg, const WT* wu, int64_t K, const float* x, int64_t B,
                const int64_t* idx, int64_t n, GatedKind kind, float* h, int nt) {
  const bool par = n * K * B >= kParallelMin && nt > 1;
  const bool gate_can_skip = kind != kSwiGLU;
  const int64_t groups = (n + kRowGroup - 1) / kRowGroup;
  const int64_t grab = rows_per_grab(2 * kRowGroup * K * int64_t(sizeof(WT)));
  parallel_for(groups, grab, par ? nt : 1, [&](int64_t g0, int64_t g1, int) {
    GroupScratch sc(B);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t j0 = g * kRowGroup;
      const int count = int(n - j0 < kRowGroup ? n - j0 : kRowGroup);
      const WT* rows[kRowGroup];
      for (int q = 0; q < count; ++q) rows[q] = wg + idx[j0 + q] * K;
      // while the gates are read, fetch this group's up rows (needed unless all gates <= 0)
      const NextRows up(wu, K, idx + j0, count, rows, count);
      dot_group(rows, count, x, K, B, sc.res, sc.part, sc.wbuf, up);
      // Up rows only for neurons whose gate fired for some token (ReGLU/dReLU): for the
      // others every h is zero and the up row is never read.
      int live[kRowGroup], m = 0;
      for (int q = 0; q < count; ++q) {
        bool any = !gate_can_skip;
        for (int64_t b = 0; b < B && !any; ++b) any = sc.res[q * B + b] > 0.0f;
        if (any) {
          rows[m] = wu + idx[j0 + q] * K;
          live[m++] = q;
        } else {
          for (int64_t b = 0; b < B; ++b) h[b * n + j0 + q] = 0.0f;
        }
      }
      const int64_t nj = j0 + kRowGroup;
      const NextRows next(wg, K, idx + nj, nj < n ? n - nj : 0, rows, m > 0 ? m : count);
      dot_group(rows, m, x, K, B, sc.res2, sc.part, sc.wbuf, next);
      for (int i = 0; i < m; ++i) {
        const int q = live[i];
        for (int64_t b = 0; b < B; ++b)
          h[b * n + j0 + q] = gated_value(kind, sc.res[q * B + b], sc.res2[i * B + b]);
      }
    }
  });
}

// out[c0:c1] += sum_q c[q] * rows[q][c0:c1] for one token (weights converted on the fly).
template <typename WT, int Q>
inline void axpy_group_b1(const WT* const* rows, const float* c, float* out, int64_t c0,
                          int64_t c1, const NextRows& next) {
  __m256 cv[Q];
  for (int q = 0; q < Q; ++q) cv[q] = _mm256_set1_ps(c[q]);
  int64_t k = c0;
  for (; k + 16 <= c1; k += 16) {
    next.at(k * int64_t(sizeof(WT)));
    __m256 y0 = _mm256_loadu_ps(out + k), y1 = _mm256_loadu_ps(out + k + 8);
    for (int q = 0; q < Q; ++q) {
      y0 = _mm256_fmadd_ps(cv[q], load8(rows[q] + k), y0);
      y1 = _mm256_fmadd_ps(cv[q], load8(rows[q] + k + 8), y1);
    }
    _mm256_storeu_ps(out + k, y0);
    _mm256_storeu_ps(out + k + 8, y1);
  }
  for (; k + 8 <= c1; k += 8) {
    __m256 y = _mm256_loadu_ps(out + k);
    for (int q = 0; q < Q; ++q) y = _mm256_fmadd_ps(cv[q], load8(rows[q] + k), y);
    _mm256_storeu_ps(out + k, y);
  }
  for (; k < c1; ++k) {
    float y = out[k];
    for (int q = 0; q < Q; ++q) y += c[q] * to_f32(rows[q][k]);
    out[k] = y;
  }
}

// Several tokens: each chunk of the Q rows is loaded (and converted to fp32) once into
// `scratch` and reused for every token from L1.
template <typename WT, int Q>
inline void axpy_group_bn(const WT* const* rows, const float* c /*[B][Q]*/, int64_t B,
                          float* out, int64_t D, int64_t c0, int64_t c1, float* scratch,
                          const NextRows& next) {
  for (int64_t kc = c0; kc < c1; kc += kChunk) {
    const int64_t ke = kc + kChunk < c1 ? kc + kChunk : c1;
    next.range(kc * int64_t(sizeof(WT)), ke * int64_t(sizeof(WT)));
    const float* src[Q];
    for (int q = 0; q < Q; ++q) {
      if constexpr (sizeof(WT) == sizeof(float)) {
        src[q] = reinterpret_cast<const float*>(rows[q]) + kc;
      } else {
        float* dst = scratch + q * kChunk;
        int64_t k = kc;
        for (; k + 8 <= ke; k += 8) _mm256_storeu_ps(dst + (k - kc), load8(rows[q] + k));
        for (; k < ke; ++k) dst[k - kc] = to_f32(rows[q][k]);
        src[q] = dst;
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      const float* cb = c + b * Q;
      bool any = false;
      for (int q = 0; q < Q; ++q) any = any || cb[q] != 0.0f;
      if (!any) continue;
      __m256 cv[Q];
      for (int q = 0; q < Q; ++q) cv[q] = _mm256_set1_ps(cb[q]);
      float* ob = out + b * D + kc;
      const int64_t len = ke - kc;
      int64_t k = 0;
      for (; k + 8 <= len; k += 8) {
        __m256 y = _mm256_loadu_ps(ob + k);
        for (int q = 0; q < Q; ++q) y = _mm256_fmadd_ps(cv[q], _mm256_loadu_ps(src[q] + k), y);
        _mm256_storeu_ps(ob + k, y);
      }
      for (; k < len; ++k) {
        float y = ob[k];
        for (int q = 0; q < Q; ++q) y += cb[q] * src[q][k];
        ob[k] = y;
      }
    }
  }
}

template <typename WT, int Q>
inline void axpy_group(const WT* w_t, int64_t D, const float* coeff, int64_t ldc, int64_t B,
                       const int64_t* rows_id, const int64_t* cols, int64_t next_count,
                       float* out, int64_t c0, int64_t c1, float* cbuf, float* scratch) {
  const WT* rows[Q];
  for (int q = 0; q < Q; ++q) rows[q] = w_t + rows_id[q] * D;
  for (int64_t b = 0; b < B; ++b)
    for (int q = 0; q < Q; ++q) cbuf[b * Q + q] = coeff[b * ldc + cols[q]];
  // rows_id continues with the next group's ids (next_count of them)
  const NextRows next(w_t, D, rows_id + Q, next_count, rows, Q);
  if (B == 1) {
    axpy_group_b1<WT, Q>(rows, cbuf, out, c0, c1, next);
  } else {
    axpy_group_bn<WT, Q>(rows, cbuf, B, out, D, c0, c1, scratch, next);
  }
}

template <typename WT>
void axpy_impl(const WT* w_t, int64_t D, const float* coeff, int64_t ldc, int64_t B,
               const int64_t* idx, int64_t n, float* out, int nt) {
  // Keep only neurons with a non-zero coefficient for some token: exact, and their rows
  // are never read (after ReLU many predicted-active neurons are in fact zero).
  int64_t* live = static_cast<int64_t*>(std::malloc(sizeof(int64_t) * 2 * (n > 0 ? n : 1)));
  int64_t* cols = live + n;
  int64_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    bool any = false;
    for (int64_t b = 0; b < B && !any; ++b) any = coeff[b * ldc + j] != 0.0f;
    if (any) {
      live[m] = idx[j];
      cols[m] = j;
      ++m;
    }
  }
  // Workers take groups of 4 neurons as they come and stream whole rows into a private
  // [B, D] partial sum (the caller straight into `out`); the partials are added at the end.
  const int64_t groups = (m + 3) / 4;
  const int64_t grab = rows_per_grab(4 * D * int64_t(sizeof(WT)));
  const bool par = m * D * B >= kParallelMin && nt > 1;
  const int workers = par ? (nt < kMaxWorkers ? nt : kMaxWorkers) : 1;
  float* partial[kMaxWorkers] = {};
  parallel_for(groups, grab, workers, [&](int64_t g0, int64_t g1, int worker) {
    float* acc = out;
    if (worker > 0) {
      if (partial[worker] == nullptr) {
        partial[worker] = static_cast<float*>(thread_scratch(2, sizeof(float) * B * D));
        std::memset(partial[worker], 0, sizeof(float) * B * D);
      }
      acc = partial[worker];
    }
    float* cbuf = static_cast<float*>(thread_scratch(0, sizeof(float) * 4 * B));
    float* scratch = static_cast<float*>(thread_scratch(1, sizeof(float) * 4 * kChunk));
    for (int64_t gi = g0; gi < g1; ++gi) {
      const int64_t j = gi * 4;
      const int64_t* r = live + j;
      const int64_t* c = cols + j;
      const int64_t rest = m - j - 4 > 4 ? 4 : (m - j - 4 > 0 ? m - j - 4 : 0);
      switch (m - j >= 4 ? 4 : int(m - j)) {
        case 4:
          axpy_group<WT, 4>(w_t, D, coeff, ldc, B, r, c, rest, acc, 0, D, cbuf, scratch);
          break;
        case 3:
          axpy_group<WT, 3>(w_t, D, coeff, ldc, B, r, c, rest, acc, 0, D, cbuf, scratch);
          break;
        case 2:
          axpy_group<WT, 2>(w_t, D, coeff, ldc, B, r, c, rest, acc, 0, D, cbuf, scratch);
          break;
        default:
          axpy_group<WT, 1>(w_t, D, coeff, ldc, B, r, c, rest, acc, 0, D, cbuf, scratch);
          break;
      }
    }
  });
  for (int p = 1; p < workers; ++p) {
    const float* src = partial[p];
    if (src == nullptr) continue;  // that helper never got CPU time: nothing to add
    int64_t e = 0;
    for (; e + 8 <= B * D; e += 8)
      _mm256_storeu_ps(out + e, _mm256_add_ps(_mm256_loadu_ps(out + e), _mm256_loadu_ps(src + e)));
    for (; e < B * D; ++e) out[e] += src[e];
  }
  std::free(live);
}

}  // namespace

void row(WType wt, const void* w, int64_t K, const float* x, int64_t B, const int64_t* idx,
         int64_t n, const float* bias, bool relu, float* out, int64_t ldo, bool scatter,
         int threads) {
  with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    row_impl(static_cast<const T*>(w), K, x, B, idx, n, bias, relu, out, ldo, scatter, threads);
  });
}

void axpy(WType wt, const void* w_t, int64_t D, const float* coeff, int64_t ldc, int64_t B,
          const int64_t* idx, int64_t n, float* out, int threads) {
  with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    axpy_impl(static_cast<const T*>(w_t), D, coeff, ldc, B, idx, n, out, threads);
  });
}

void gated_hidden(WType wt, const void* w_gate, const void* w_up, int64_t K, const float* x,
                  int64_t B, const int64_t* idx, int64_t n, GatedKind kind, float* h,
                  int threads) {
  with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    gated_impl(static_cast<const T*>(w_gate), static_cast<const T*>(w_up), K, x, B, idx, n,
               kind, h, threads);
  });
}

void dense(WType wt, const void* w, int64_t N, int64_t K, const float* x, int64_t B,
           const float* bias, WType ot, void* out, int64_t ldo, int threads) {
  with_type(wt, [&](auto tag) {
    using T = decltype(tag);
    dense_out(static_cast<const T*>(w), N, K, x, B, bias, ot, out, ldo, threads);
  });
}

void to_float(WType t, const void* src, int64_t n, float* dst) {
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    to_float_impl(static_cast<const T*>(src), n, dst);
  });
}

double read_sum(const float* buf, int64_t n, int threads) {
  constexpr int64_t kBlock = int64_t(1) << 18;  // 1 MiB of floats per work item
  double sums[kMaxWorkers] = {};
  parallel_for((n + kBlock - 1) / kBlock, 1, threads, [&](int64_t b0, int64_t b1, int worker) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t b = blk * kBlock;
      const int64_t e = b + kBlock < n ? b + kBlock : n;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
      int64_t k = b;
      for (; k + 32 <= e; k += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(buf + k));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(buf + k + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(buf + k + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(buf + k + 24));
      }
      double s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      for (; k < e; ++k) s += buf[k];
      sums[worker] += s;
    }
  });
  double total = 0.0;
  for (double v : sums) total += v;
  return total;
}

int threads_used(int threads) { return probe_workers(threads, 200, 500); }

}  // namespace pbops
