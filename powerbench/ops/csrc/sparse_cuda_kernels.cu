// CUDA implementation of the neuron-aware sparse kernels (see sparse_cuda_kernels.cuh).
//   row   : a warp owns R neuron rows; per pass over K every lane issues all its 16-byte
//           weight loads (V per row, streamed past L1) before using any of them, so a row's
//           bytes are in flight at once; x is read in its own dtype (L1-resident) and each
//           x load is reused for the R rows. Decode (batch 1): R = 1, V = 16 (8 KB of fp16
//           row per pass); batches: R = 4 rows x 8 tokens per warp.
//   axpy  : each lane owns one 16-byte slice of the output columns; a warp takes U neurons
//           at a time (their ids and coefficients read by U lanes in parallel, then
//           shuffled), issues the U weight loads, then accumulates. Warps of a block meet in
//           shared memory; blocks of one column tile meet in an fp32 workspace, and the last
//           one to finish (counter + threadfence) writes the result in the output dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "sparse_cuda_kernels.cuh"

namespace pbcuda {
namespace {

constexpr int kWarps = 8;  // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kMaxTokens = 8;        // token tile for batches > 1
constexpr int kAxpyBlocksPerSM = 4;  // axpy: blocks per SM to aim for
constexpr int kAxpyMinSplitRows = 64;

template <typename T>
struct Tag {
  using type = T;
};

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float load_any(Typed o, int64_t i) {
  switch (o.t) {
    case kF16: return __half2float(static_cast<const __half*>(o.p)[i]);
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(o.p)[i]);
    default: return static_cast<const float*>(o.p)[i];
  }
}

// The same through L2 only (ld.global.cg): data another grid of this call wrote (the axpy's
// coefficients come from the FFN's row kernel, which may still be finishing when the axpy
// is launched; no L1 line of an earlier call can be hit).
__device__ __forceinline__ float load_any_cg(Typed o, int64_t i) {
  switch (o.t) {
    case kF16: return __half2float(__ldcg(static_cast<const __half*>(o.p) + i));
    case kBF16: return __bfloat162float(__ldcg(static_cast<const __nv_bfloat16*>(o.p) + i));
    default: return __ldcg(static_cast<const float*>(o.p) + i);
  }
}

__device__ __forceinline__ void store_any(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

// 16 bytes of weights, read once: no L1 allocation (keeps L1 for x / coefficients).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// The 16 / sizeof(T) values of T packed in `raw`, as floats.
template <typename T, int N>
__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[N]) {
  static_assert(N * sizeof(T) == 16, "one 16-byte vector");
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(raw.x); v[1] = __uint_as_float(raw.y);
    v[2] = __uint_as_float(raw.z); v[3] = __uint_as_float(raw.w);
  } else {
    const unsigned u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f;
      if constexpr (std::is_same_v<T, __half>) {
        f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      } else {
        f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u[i]));
      }
      v[2 * i] = f.x; v[2 * i + 1] = f.y;
    }
  }
}

// N consecutive values of T at p (N * sizeof(T) = 8, 16 or 32 bytes, aligned to 8 / 16):
// load_raw issues the loads (through the read-only cache) into 16-byte words, unpack_raw
// turns them into floats, so a caller can put many loads in flight before using any.
template <typename T, int N>
__host__ __device__ constexpr int raw_words() { return (N * int(sizeof(T)) + 15) / 16; }

template <typename T, int N>
__device__ __forceinline__ void load_raw(const T* p, uint4 (&r)[raw_words<T, N>()]) {
  constexpr int kBytes = N * int(sizeof(T));
  if constexpr (kBytes == 8) {
    const uint2 h = __ldg(reinterpret_cast<const uint2*>(p));
    r[0] = make_uint4(h.x, h.y, 0u, 0u);
  } else {
    static_assert(kBytes % 16 == 0, "8, 16 or 32 bytes");
#pragma unroll
    for (int h = 0; h < kBytes / 16; ++h) r[h] = __ldg(reinterpret_cast<const uint4*>(p) + h);
  }
}

template <typename T, int N>
__device__ __forceinline__ void unpack_raw(const uint4 (&r)[raw_words<T, N>()], float (&v)[N]) {
  constexpr int kBytes = N * int(sizeof(T));
  if constexpr (kBytes == 8 && sizeof(T) == 4) {
    v[0] = __uint_as_float(r[0].x); v[1] = __uint_as_float(r[0].y);
  } else {
    constexpr int M = 16 / int(sizeof(T));  // values per word (a half-used word when 8 bytes)
#pragma unroll
    for (int h = 0; h < raw_words<T, N>(); ++h) {
      float tmp[M];
      unpack<T, M>(r[h], tmp);
#pragma unroll
      for (int i = 0; i < M && h * M + i < N; ++i) v[h * M + i] = tmp[i];
    }
  }
}

template <typename T, int N>
__device__ __forceinline__ void load_f(const T* p, float (&v)[N]) {
  uint4 r[raw_words<T, N>()];
  load_raw<T, N>(p, r);
  unpack_raw<T, N>(r, v);
}

// x for the row kernels: through the read-only cache from global memory, or (S: x staged in
// shared memory by the block) with a plain load.
template <typename T, int N, bool S>
__device__ __forceinline__ void load_x(const T* p, float (&v)[N]) {
  if constexpr (S) {
    uint4 r[raw_words<T, N>()];
    if constexpr (N * sizeof(T) == 8) {
      const uint2 h = *reinterpret_cast<const uint2*>(p);
      r[0] = make_uint4(h.x, h.y, 0u, 0u);
    } else {
#pragma unroll
      for (int i = 0; i < raw_words<T, N>(); ++i) r[i] = reinterpret_cast<const uint4*>(p)[i];
    }
    unpack_raw<T, N>(r, v);
  } else {
    load_f<T, N>(p, v);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;  // bitwise the same in every lane (fp addition commutes)
}

// Zeroes `words` 32-bit words at p with every thread of the grid (the row kernels clear the
// axpy workspace of the same FFN call this way, sparing a memset launch).
__device__ __forceinline__ void zero_words(void* p, int64_t words) {
  if (p == nullptr) return;
  const int64_t threads = int64_t(gridDim.x) * gridDim.y * blockDim.x;
  for (int64_t i = (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
       i < words; i += threads)
    static_cast<unsigned*>(p)[i] = 0u;
}

// Programmatic dependent launch (sm_90+; no-ops when a grid has no such dependency): an FFN's
// row kernel lets its axpy be launched while it still runs, and the axpy waits for the row
// kernel's results (h, the cleared workspace) only where it needs them.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Active slot j -> neuron id r; false when the neuron is inactive (threshold mode).
__device__ __forceinline__ bool resolve(const Active& a, int64_t j, int64_t& r) {
  if (a.idx != nullptr) {
    r = a.idx64 ? static_cast<const int64_t*>(a.idx)[j] : static_cast<const int32_t*>(a.idx)[j];
    return true;
  }
  r = j;
  return load_any(a.scores, j) > a.threshold;
}

// acc[r][t] = W[rows[r]] . x[t] for the live rows (0 for the others), t < nt, summed over the
// warp (every lane gets the sums). Needs K % (16 / sizeof(WT)) == 0, W and x 16-byte aligned.
template <typename WT, typename XT, int R, int TB, int V, bool S>
__device__ __forceinline__ void rows_dot_vec(const WT* __restrict__ w, const int64_t (&rows)[R],
                                             const bool (&live)[R], const XT* __restrict__ x,
                                             int64_t K, int nt, int lane, float (&acc)[R][TB]) {
  constexpr int N = 16 / int(sizeof(WT));
  constexpr int64_t kPass = int64_t(V) * 32 * N;
  for (int64_t base = 0; base < K; base += kPass) {
    uint4 raw[R][V];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int64_t k = base + int64_t(v * 32 + lane) * N;
        raw[r][v] = (live[r] && k < K) ? load_stream(w + rows[r] * K + k) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t k = base + int64_t(v * 32 + lane) * N;
      if (k >= K) break;  // lanes run out together within a vector step, except the last
      float wv[R][N];
#pragma unroll
      for (int r = 0; r < R; ++r) unpack<WT, N>(raw[r][v], wv[r]);
#pragma unroll
      for (int t = 0; t < TB; ++t) {
        if (t >= nt) break;
        float xv[N];
        load_x<XT, N, S>(x + t * K + k, xv);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float s = acc[r][t];
#pragma unroll
          for (int e = 0; e < N; ++e) s = fmaf(wv[r][e], xv[e], s);
          acc[r][t] = s;
        }
      }
    }
  }
}

template <typename WT, typename XT, int R, int TB>
__device__ __forceinline__ void rows_dot_scalar(const WT* __restrict__ w, const int64_t (&rows)[R],
                                                const bool (&live)[R], const XT* __restrict__ x,
                                                int64_t K, int nt, int lane, float (&acc)[R][TB]) {
  for (int64_t k = lane; k < K; k += 32) {
    float wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = live[r] ? to_f(w[rows[r] * K + k]) : 0.0f;
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t >= nt) break;
      const float xv = to_f(x[t * K + k]);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][t] = fmaf(wv[r], xv, acc[r][t]);
    }
  }
}

template <typename WT, typename XT, int R, int TB, int V, bool S>
__device__ __forceinline__ void rows_dot(const WT* __restrict__ w, const int64_t (&rows)[R],
                                         const bool (&live)[R], const XT* __restrict__ x,
                                         int64_t K, int nt, int lane, bool vec,
                                         float (&acc)[R][TB]) {
  bool any = false;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    any = any || live[r];
#pragma unroll
    for (int t = 0; t < TB; ++t) acc[r][t] = 0.0f;
  }
  if (!any) return;  // warp-uniform
  if (vec) {
    rows_dot_vec<WT, XT, R, TB, V, S>(w, rows, live, x, K, nt, lane, acc);
  } else {
    rows_dot_scalar<WT, XT, R, TB>(w, rows, live, x, K, nt, lane, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TB; ++t) acc[r][t] = warp_sum(acc[r][t]);
}

// The warp's R active slots j0 + r: neuron ids, liveness, output columns.
template <int R>
__device__ __forceinline__ void warp_rows(const Active& a, int64_t j0, bool scatter,
                                          int64_t (&rows)[R], bool (&live)[R],
                                          int64_t (&col)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t j = j0 + r;
    rows[r] = 0;
    live[r] = j < a.n && resolve(a, j, rows[r]);
    col[r] = (a.idx != nullptr && !scatter) ? j : rows[r];
  }
}

// S: the block copies its token tile of x (`values` of them, 16-byte aligned, a multiple of
// 16 bytes: the 16-byte path's conditions) into shared memory with every thread's loads in
// flight at once, and the warps read x from there. Read from global memory instead, each
// step's x loads wait for the previous step's FMAs (the compiler keeps them in order to save
// registers): one L2 round trip per step and token, ~60 us per warp at batch 8 on an H200.
// Called by every thread before any returns (it holds a block barrier).
template <typename XT, bool S>
__device__ __forceinline__ const XT* staged_x(const XT* x, int64_t values) {
  if constexpr (S) {
    extern __shared__ uint4 staged_words[];
    const int64_t words = values * int64_t(sizeof(XT)) / 16;
    const uint4* src = reinterpret_cast<const uint4*>(x);
    constexpr int kInFlight = 8;  // loads per thread issued before their stores
    const int64_t step = blockDim.x;
    for (int64_t i = threadIdx.x; i < words; i += kInFlight * step) {
      uint4 part[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        if (i + u * step < words) part[u] = __ldg(src + i + u * step);
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        if (i + u * step < words) staged_words[i + u * step] = part[u];
      }
    }
    __syncthreads();
    return reinterpret_cast<const XT*>(staged_words);
  } else {
    return x;
  }
}

template <typename WT, typename XT, int R, int TB, int V, int W, bool S>
__global__ void __launch_bounds__(W * 32)
    row_kernel(const WT* __restrict__ w, int64_t K, const XT* __restrict__ x, int64_t B,
               Active a, Typed bias, bool relu, DType ot, void* __restrict__ out, int64_t ldo,
               bool scatter, bool vec, void* zero, int64_t zero_n) {
  zero_words(zero, zero_n);
  allow_dependent_launch();
  const int lane = threadIdx.x & 31;
  const int64_t j0 = (int64_t(blockIdx.x) * W + (threadIdx.x >> 5)) * R;
  const int64_t b0 = int64_t(blockIdx.y) * TB;
  const int nt = int(B - b0 < TB ? B - b0 : TB);
  const XT* xt = staged_x<XT, S>(x + b0 * K, int64_t(nt) * K);
  if (j0 >= a.n) return;
  int64_t rows[R], col[R];
  bool live[R];
  warp_rows<R>(a, j0, scatter, rows, live, col);
  float acc[R][TB];
  rows_dot<WT, XT, R, TB, V, S>(w, rows, live, xt, K, nt, lane, vec, acc);
  // value (r, t) is stored by lane (r * TB + t) % 32
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (lane != (r * TB + t) % 32 || t >= nt || j0 + r >= a.n) continue;
      float v = 0.0f;
      if (live[r]) {
        v = acc[r][t] + (bias.p != nullptr ? load_any(bias, rows[r]) : 0.0f);
        if (relu && !(v > 0.0f)) v = 0.0f;
      }
      store_any(out, ot, (b0 + t) * ldo + col[r], v);
    }
  }
}

template <typename WT, typename XT, int R, int TB, int V, int W, bool S>
__global__ void __launch_bounds__(W * 32)
    gated_kernel(const WT* __restrict__ wg, const WT* __restrict__ wu, int64_t K,
                 const XT* __restrict__ x, int64_t B, Active a, GatedKind kind,
                 float* __restrict__ h, bool vec, void* zero, int64_t zero_n) {
  zero_words(zero, zero_n);
  allow_dependent_launch();
  const int lane = threadIdx.x & 31;
  const int64_t j0 = (int64_t(blockIdx.x) * W + (threadIdx.x >> 5)) * R;
  const int64_t b0 = int64_t(blockIdx.y) * TB;
  const int nt = int(B - b0 < TB ? B - b0 : TB);
  const XT* xt = staged_x<XT, S>(x + b0 * K, int64_t(nt) * K);
  if (j0 >= a.n) return;
  int64_t rows[R], col[R];
  bool live[R];
  warp_rows<R>(a, j0, /*scatter=*/false, rows, live, col);
  float g[R][TB];
  rows_dot<WT, XT, R, TB, V, S>(wg, rows, live, xt, K, nt, lane, vec, g);
  bool up[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {  // warp-uniform: every lane holds the reduced sums
    bool any = kind == kSwiGLU;
#pragma unroll
    for (int t = 0; t < TB; ++t) any = any || (t < nt && g[r][t] > 0.0f);
    up[r] = live[r] && any;
  }
  float u[R][TB];
  rows_dot<WT, XT, R, TB, V, S>(wu, rows, up, xt, K, nt, lane, vec, u);
  const int64_t ldh = a.n;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (lane != (r * TB + t) % 32 || t >= nt || j0 + r >= a.n) continue;
      float v = 0.0f;
      if (up[r]) {
        const float gv = g[r][t], uv = u[r][t];
        if (kind == kReGLU) {
          v = gv > 0.0f ? gv * uv : 0.0f;
        } else if (kind == kDReLU) {
          v = (gv > 0.0f && uv > 0.0f) ? gv * uv : 0.0f;
        } else {
          v = gv / (1.0f + __expf(-gv)) * uv;
        }
      }
      h[(b0 + t) * ldh + col[r]] = v;
    }
  }
}

// Lane u < U resolves slot c0 + u: its neuron id (returned: every lane gets all U), its
// coefficients (kept in lane u, `my_c`; shuffled out as they are used) and liveness (bit u of
// `live`; a neuron whose coefficients are all zero is not read).
template <int TB, int U>
__device__ __forceinline__ unsigned axpy_slots(const Active& a, Typed coeff, int64_t ldc,
                                               int64_t b0, int nt, int64_t c0, int64_t j1,
                                               int lane, int64_t (&r)[U], float (&my_c)[TB]) {
  int64_t my_r = 0;
  bool my_live = false;
#pragma unroll
  for (int t = 0; t < TB; ++t) my_c[t] = 0.0f;
  if (lane < U && c0 + lane < j1) {
    my_live = resolve(a, c0 + lane, my_r);
    bool any = false;
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (my_live && t < nt) my_c[t] = load_any_cg(coeff, (b0 + t) * ldc + c0 + lane);
      any = any || my_c[t] != 0.0f;
    }
    my_live = my_live && any;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) r[u] = __shfl_sync(0xffffffffu, my_r, u);
  return __ballot_sync(0xffffffffu, my_live);
}

// Adds 4 consecutive columns of a split's partial sum into the fp32 workspace (one 16-byte
// atomic on sm_90+).
__device__ __forceinline__ void add4(float* p, const float (&v)[4], bool vec4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (vec4) {
    atomicAdd(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
    return;
  }
#endif
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (v[i] != 0.0f) atomicAdd(p + i, v[i]);
}

// Grid: x = column tiles (32 lanes x N columns), y = neuron splits, z = token tiles.
template <typename WT, int TB, int U>
__global__ void __launch_bounds__(kThreads, TB == 1 ? 4 : 2)
    axpy_kernel(const WT* __restrict__ wt, int64_t D, Typed coeff, int64_t ldc, int64_t B,
                Active a, Typed bias, DType ot, void* __restrict__ out,
                float* __restrict__ ws, unsigned* __restrict__ counters,
                int64_t rows_per_split, bool vec) {
  constexpr int N = 16 / int(sizeof(WT));
  constexpr int kSlots = 32 * N;  // columns of a tile with 16-byte loads
  __shared__ __align__(16) float part[kWarps][kSlots];
  __shared__ bool last_block;
  const int V = vec ? N : 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col = (int64_t(blockIdx.x) * 32 + lane) * V;
  const int64_t j0 = int64_t(blockIdx.y) * rows_per_split;
  const int64_t j1 = j0 + rows_per_split < a.n ? j0 + rows_per_split : a.n;
  const int64_t b0 = int64_t(blockIdx.z) * TB;
  const int nt = int(B - b0 < TB ? B - b0 : TB);
  const bool in_range = col < D;
  wait_for_prerequisites();  // h and the workspace come from the FFN's row kernel
  float acc[TB][N];
#pragma unroll
  for (int t = 0; t < TB; ++t)
#pragma unroll
    for (int e = 0; e < N; ++e) acc[t][e] = 0.0f;
  for (int64_t c0 = j0 + int64_t(warp) * U; c0 < j1; c0 += int64_t(kWarps) * U) {
    int64_t r[U];
    float my_c[TB];
    const unsigned live = axpy_slots<TB, U>(a, coeff, ldc, b0, nt, c0, j1, lane, r, my_c);
    if (vec) {
      uint4 raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        raw[u] = ((live >> u) & 1u) && in_range ? load_stream(wt + r[u] * D + col)
                                                : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!((live >> u) & 1u)) continue;  // warp-uniform
        float wv[N];
        unpack<WT, N>(raw[u], wv);
#pragma unroll
        for (int t = 0; t < TB; ++t) {
          const float cv = __shfl_sync(0xffffffffu, my_c[t], u);
#pragma unroll
          for (int e = 0; e < N; ++e) acc[t][e] = fmaf(cv, wv[e], acc[t][e]);
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!((live >> u) & 1u)) continue;
        const float wv = in_range ? to_f(wt[r[u] * D + col]) : 0.0f;
#pragma unroll
        for (int t = 0; t < TB; ++t)
          acc[t][0] = fmaf(__shfl_sync(0xffffffffu, my_c[t], u), wv, acc[t][0]);
      }
    }
  }
  const bool split = gridDim.y > 1;
  // slot s of the tile = lane' * N + e -> column (tile * 32 + lane') * V + e; a thread takes
  // 4 consecutive slots (4 columns of one lane' with vector loads).
  auto column = [&](int s) { return (int64_t(blockIdx.x) * 32 + s / N) * V + s % N; };
  auto valid = [&](int s) { return s % N < V && column(s) < D; };
  auto finish = [&](int64_t t, int s, float v) {
    const int64_t c_out = column(s);
    if (bias.p != nullptr) v += load_any(bias, c_out);
    store_any(out, ot, (b0 + t) * D + c_out, v);
  };
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    if (t >= nt) break;  // block-uniform
#pragma unroll
    for (int e = 0; e < N; ++e) part[warp][lane * N + e] = acc[t][e];
    __syncthreads();
    for (int s = threadIdx.x * 4; s < kSlots; s += kThreads * 4) {
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v[i] += part[w][s + i];
      }
      if (!split) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (valid(s + i)) finish(t, s + i, v[i]);
      } else if (vec) {  // V = N >= 4: the 4 slots are 4 in-range or 4 out-of-range columns
        if (valid(s)) add4(ws + (b0 + t) * D + column(s), v, true);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (valid(s + i) && v[i] != 0.0f) atomicAdd(ws + (b0 + t) * D + column(s + i), v[i]);
      }
    }
    __syncthreads();
  }
  if (!split) return;
  // The last block of this column tile to arrive writes the tile (threadFenceReduction).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned done = atomicAdd(counters + blockIdx.z * gridDim.x + blockIdx.x, 1u);
    last_block = done == gridDim.y - 1;
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  for (int t = 0; t < nt; ++t)
    for (int s = threadIdx.x; s < kSlots; s += kThreads)
      if (valid(s)) finish(t, s, __ldcg(ws + (b0 + t) * D + column(s)));
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

unsigned cdiv(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

size_t elem_size(DType t) { return t == kF32 ? 4 : 2; }

// Values of the weight type per 16-byte load.
int64_t vec_width(DType wt) { return int64_t(16 / elem_size(wt)); }

template <typename F>
cudaError_t with_type(DType t, F&& f) {
  switch (t) {
    case kF32: return f(Tag<float>{});
    case kF16: return f(Tag<__half>{});
    case kBF16: return f(Tag<__nv_bfloat16>{});
  }
  return cudaErrorInvalidValue;
}

// x is read as fp32 or as the weights' dtype (the binding converts any other x to fp32).
// f(weight tag, x tag, rows per warp, token tile, 16-byte loads per row and pass, warps per
// block): decode gets one row per warp with 16 loads in flight; batches 4 rows x 8 tokens.
// 4-warp blocks: the few active rows of a sparse layer spread over more SMs, and the
// batched kernels (~165 registers) fit 12 warps on an SM where 8-warp blocks fit 8.
template <typename F>
cudaError_t with_row_config(DType wt, DType xt, int64_t B, F&& f) {
  if (xt != wt && xt != kF32) return cudaErrorInvalidValue;  // see launch_row
  return with_type(wt, [&](auto wtag) {
    auto tiles = [&](auto xtag) {
      if (B <= 1) {
        return f(wtag, xtag, std::integral_constant<int, 1>{}, std::integral_constant<int, 1>{},
                 std::integral_constant<int, 16>{}, std::integral_constant<int, 4>{});
      }
      return f(wtag, xtag, std::integral_constant<int, 4>{},
               std::integral_constant<int, kMaxTokens>{}, std::integral_constant<int, 4>{},
               std::integral_constant<int, 4>{});
    };
    if (xt == kF32) return tiles(Tag<float>{});
    return tiles(wtag);
  });
}

// Shared memory for x staged by a row block (0: x read from global memory): its whole token
// tile, when the 16-byte path applies and the tile fits kMaxStagedX (a decode step's x
// always does: 8 KB for d_model 4096 in fp16; batch 8 up to d_model 8192 in fp16).
constexpr size_t kMaxStagedX = 160 * 1024;
constexpr size_t kDefaultSharedBytes = 48 * 1024;  // beyond this a kernel must opt in

// The most shared memory a block may stage x in: kMaxStagedX, or less where the device
// allows less (e.g. 64 KB on sm_75, 99 KB on sm_86).
size_t staged_x_limit() {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    return kDefaultSharedBytes;
  }
  return optin > 0 && size_t(optin) < kMaxStagedX ? size_t(optin) : kMaxStagedX;
}

size_t staged_x_bytes(bool vec, int64_t tb, int64_t K, size_t x_bytes) {
  const size_t bytes = size_t(tb) * size_t(K) * x_bytes;
  if (!vec || bytes > kMaxStagedX) return 0;
  return bytes <= kDefaultSharedBytes || bytes <= staged_x_limit() ? bytes : 0;
}

// Launches `kernel` (a row or gated kernel instantiation) with `smem` bytes of dynamic shared
// memory, opting in (once per instantiation, to the device's limit) beyond the default.
template <typename Kernel, typename... Args>
cudaError_t launch_staged(Kernel kernel, dim3 grid, int threads, size_t smem,
                          cudaStream_t stream, Args... args) {
  if (smem > kDefaultSharedBytes) {
    static const cudaError_t opted = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(staged_x_limit()));
    if (opted != cudaSuccess) return opted;
  }
  kernel<<<grid, threads, smem, stream>>>(args...);
  return cudaGetLastError();
}

bool row_vec(DType wt, int64_t K, const void* x, std::initializer_list<const void*> ws) {
  bool ok = K % vec_width(wt) == 0 && aligned(x, 16);
  for (const void* w : ws) ok = ok && aligned(w, 16);
  return ok;
}

// One launch of a row-family kernel (row_kernel, gated_kernel): its types and tile sizes
// (with_row_config), grid, threads and staged-x bytes.
template <typename W, typename X, int R, int TB, int V, int NW>
struct RowLaunch {
  using WT = W;
  using XT = X;
  static constexpr int kR = R, kTB = TB, kV = V, kW = NW;
  dim3 grid;
  int threads;
  size_t smem;
};

// The shared preamble of launch_row and launch_gated: an empty active set only zeroes
// `zero`; else launch(RowLaunch<...>, std::bool_constant<x staged in shared memory>).
template <typename F>
cudaError_t launch_rows(DType wt, DType xt, int64_t K, int64_t B, const Active& a, bool vec,
                        cudaStream_t stream, void* zero, size_t zero_bytes, F&& launch) {
  if (a.n == 0 || B == 0) return zero ? cudaMemsetAsync(zero, 0, zero_bytes, stream) : cudaSuccess;
  return with_row_config(wt, xt, B, [&](auto wtag, auto xtag, auto R, auto TB, auto V, auto W) {
    using XT = typename decltype(xtag)::type;
    constexpr int kR = decltype(R)::value, kTB = decltype(TB)::value;
    constexpr int kV = decltype(V)::value, kW = decltype(W)::value;
    const RowLaunch<typename decltype(wtag)::type, XT, kR, kTB, kV, kW> cfg{
        dim3(cdiv(cdiv(a.n, kR), kW), cdiv(B, kTB)), kW * 32, staged_x_bytes(vec, kTB, K, sizeof(XT))};
    return cfg.smem ? launch(cfg, std::true_type{}) : launch(cfg, std::false_type{});
  });
}

struct AxpyPlan {
  unsigned gx, splits, gz;
  int64_t rows_per_split;
};

AxpyPlan plan_axpy(DType wt, int64_t D, int64_t B, int64_t n, int num_sms, bool vec) {
  const int tb = B <= 1 ? 1 : kMaxTokens;
  const int64_t cols_per_block = 32 * (vec ? vec_width(wt) : 1);
  AxpyPlan p{};
  p.gx = cdiv(D, cols_per_block);
  p.gz = cdiv(B, tb);
  // Enough blocks to fill the GPU, each with >= kAxpyMinSplitRows neurons (fewer splits:
  // less traffic through the workspace).
  const int64_t nn = n > 0 ? n : 1;
  const int64_t tiles = int64_t(p.gx) * p.gz;
  int64_t splits = (int64_t(num_sms > 0 ? num_sms : 1) * kAxpyBlocksPerSM + tiles - 1) / tiles;
  const int64_t max_splits = (nn + kAxpyMinSplitRows - 1) / kAxpyMinSplitRows;
  if (splits > max_splits) splits = max_splits;
  if (splits > 65535) splits = 65535;
  if (splits < 1) splits = 1;
  p.rows_per_split = (nn + splits - 1) / splits;
  p.splits = unsigned((nn + p.rows_per_split - 1) / p.rows_per_split);
  return p;
}

// Programmatic dependent launch needs compute capability 9.0 (read once per device);
// POWERBENCH_CUDA_PDL=0 turns it off (plain stream order, for A/B runs).
bool programmatic_launch_supported() {
  static const bool allowed = [] {
    const char* env = std::getenv("POWERBENCH_CUDA_PDL");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  if (!allowed) return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  static int cached[64] = {};  // 0 unknown, 1 no, 2 yes; a benign race (same value written)
  if (device < 0 || device >= 64) return false;
  if (cached[device] == 0) {
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
                    cudaSuccess && major >= 9;
    cached[device] = ok ? 2 : 1;
  }
  return cached[device] == 2;
}

size_t plan_workspace(const AxpyPlan& p, int64_t D, int64_t B) {
  if (p.splits <= 1) return 0;
  return size_t(B) * size_t(D) * sizeof(float) + size_t(p.gx) * p.gz * sizeof(unsigned);
}

}  // namespace

cudaError_t launch_row(DType wt, const void* w, int64_t K, DType xt, const void* x, int64_t B,
                       Active a, Typed bias, bool relu, DType ot, void* out, int64_t ldo,
                       bool scatter, cudaStream_t stream, void* zero, size_t zero_bytes) {
  const bool vec = row_vec(wt, K, x, {w});
  return launch_rows(wt, xt, K, B, a, vec, stream, zero, zero_bytes, [&](auto cfg, auto staged) {
    using C = decltype(cfg);
    using WT = typename C::WT;
    using XT = typename C::XT;
    return launch_staged(row_kernel<WT, XT, C::kR, C::kTB, C::kV, C::kW, decltype(staged)::value>,
                         cfg.grid, cfg.threads, cfg.smem, stream, static_cast<const WT*>(w), K,
                         static_cast<const XT*>(x), B, a, bias, relu, ot, out, ldo, scatter, vec,
                         zero, int64_t(zero_bytes / 4));
  });
}

cudaError_t launch_gated(DType wt, const void* w_gate, const void* w_up, int64_t K, DType xt,
                         const void* x, int64_t B, Active a, GatedKind kind, float* h,
                         cudaStream_t stream, void* zero, size_t zero_bytes) {
  const bool vec = row_vec(wt, K, x, {w_gate, w_up});
  return launch_rows(wt, xt, K, B, a, vec, stream, zero, zero_bytes, [&](auto cfg, auto staged) {
    using C = decltype(cfg);
    using WT = typename C::WT;
    using XT = typename C::XT;
    return launch_staged(gated_kernel<WT, XT, C::kR, C::kTB, C::kV, C::kW, decltype(staged)::value>,
                         cfg.grid, cfg.threads, cfg.smem, stream, static_cast<const WT*>(w_gate),
                         static_cast<const WT*>(w_up), K, static_cast<const XT*>(x), B, a, kind, h,
                         vec, zero, int64_t(zero_bytes / 4));
  });
}

size_t axpy_workspace_bytes(DType wt, int64_t D, int64_t B, int64_t n, int num_sms) {
  if (B == 0 || D == 0) return 0;
  // the plan with vector loads needs at least as much as without
  const AxpyPlan p = plan_axpy(wt, D, B, n, num_sms, /*vec=*/false);
  const AxpyPlan q = plan_axpy(wt, D, B, n, num_sms, /*vec=*/true);
  const size_t a = plan_workspace(p, D, B), b = plan_workspace(q, D, B);
  return a > b ? a : b;
}

cudaError_t launch_axpy(DType wt, const void* w_t, int64_t D, Typed coeff, int64_t ldc,
                        int64_t B, Active a, Typed bias, DType ot, void* out, void* workspace,
                        bool after_row_kernel, int num_sms, cudaStream_t stream) {
  if (B == 0 || D == 0) return cudaSuccess;
  const bool vec = D % vec_width(wt) == 0 && aligned(w_t, 16);
  const AxpyPlan p = plan_axpy(wt, D, B, a.n, num_sms, vec);
  float* ws = nullptr;
  unsigned* counters = nullptr;
  if (p.splits > 1) {
    if (workspace == nullptr) return cudaErrorInvalidValue;
    if (!after_row_kernel) {
      const cudaError_t err = cudaMemsetAsync(workspace, 0, plan_workspace(p, D, B), stream);
      if (err != cudaSuccess) return err;
    }
    ws = static_cast<float*>(workspace);
    counters = reinterpret_cast<unsigned*>(ws + B * D);
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(p.gx, p.splits, p.gz);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (after_row_kernel && programmatic_launch_supported()) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return with_type(wt, [&](auto wtag) {
    using WT = typename decltype(wtag)::type;
    auto kernel = B <= 1 ? axpy_kernel<WT, 1, 8> : axpy_kernel<WT, kMaxTokens, 8>;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<const WT*>(w_t), D, coeff, ldc, B, a,
                              bias, ot, out, ws, counters, p.rows_per_split, vec);
  });
}

}  // namespace pbcuda
