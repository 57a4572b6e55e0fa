// CUDA implementation of the neuron-aware sparse kernels (see sparse_cuda_kernels.cuh).
//   row   : one warp per active neuron row, 16-byte weight loads (4 fp32 or 8 fp16/bf16
//           values per lane), warp-shuffle reduction, up to 8 tokens per warp (the weight
//           row is read once for them).
//   axpy  : each thread owns one 16-byte slice of the output columns; blocks split the
//           active neurons, issue the loads of kUnroll neurons before using any of them
//           (memory-level parallelism), and combine partial sums with atomicAdd.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sparse_cuda_kernels.cuh"

namespace pbcuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kMaxTokens = 8;         // tokens per warp (row) / per block (axpy)
constexpr int64_t kMinRowsPerSplit = 64;  // axpy: neurons per block at least
constexpr int kUnroll = 4;                // axpy: neurons whose loads are in flight at once
constexpr int kBlocksPerSM = 8;           // axpy: blocks per SM to aim for

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

// Values of WT in one 16-byte load.
template <typename WT>
struct Vec {
  static constexpr int N = 16 / sizeof(WT);
};

__device__ __forceinline__ void load_vec(const float* p, float (&v)[4]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
}
__device__ __forceinline__ void load_vec(const __half* p, float (&v)[8]) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    v[2 * i] = f.x; v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x; v[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// acc[t] = W_row . x[b0 + t] for t < nt, summed over the warp (every lane gets the sums).
// `vec` (warp-uniform): 16-byte weight loads, needs K % Vec<WT>::N == 0 and aligned rows.
template <typename WT, int TB>
__device__ __forceinline__ void warp_dot(const WT* __restrict__ wr, const float* __restrict__ x,
                                         int64_t K, int nt, int lane, bool vec,
                                         float (&acc)[TB]) {
  constexpr int N = Vec<WT>::N;
#pragma unroll
  for (int t = 0; t < TB; ++t) acc[t] = 0.0f;
  if (vec) {
#pragma unroll 4
    for (int64_t k = lane * N; k < K; k += 32 * N) {
      float wv[N];
      load_vec(wr + k, wv);
#pragma unroll
      for (int t = 0; t < TB; ++t) {
        if (t < nt) {
#pragma unroll
          for (int e = 0; e < N; e += 4) {
            const float4 xv = __ldg(reinterpret_cast<const float4*>(x + t * K + k + e));
            acc[t] += wv[e] * xv.x + wv[e + 1] * xv.y + wv[e + 2] * xv.z + wv[e + 3] * xv.w;
          }
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      const float wv = to_f(wr[k]);
#pragma unroll
      for (int t = 0; t < TB; ++t)
        if (t < nt) acc[t] += wv * __ldg(x + t * K + k);
    }
  }
#pragma unroll
  for (int t = 0; t < TB; ++t) acc[t] = warp_sum(acc[t]);
}

// Resolve warp's active slot j to a neuron id; false when the neuron is inactive.
__device__ __forceinline__ bool resolve(const Active& a, int64_t j, int64_t& r) {
  if (a.idx != nullptr) {
    r = a.idx[j];
    return true;
  }
  r = j;
  return a.scores[j] > a.threshold;
}

template <typename WT, int TB>
__global__ void __launch_bounds__(kThreads)
    row_kernel(const WT* __restrict__ w, int64_t K, const float* __restrict__ x, int64_t B,
               Active a, const float* __restrict__ bias, bool relu, float* __restrict__ out,
               int64_t ldo, bool scatter, bool vec) {
  const int lane = threadIdx.x & 31;
  const int64_t j = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (j >= a.n) return;
  const int64_t b0 = int64_t(blockIdx.y) * TB;
  const int nt = int(B - b0 < TB ? B - b0 : TB);
  int64_t r;
  const bool live = resolve(a, j, r);
  const int64_t col = (a.idx != nullptr && !scatter) ? j : r;
  if (!live) {
    if (lane < nt) out[(b0 + lane) * ldo + col] = 0.0f;
    return;
  }
  float acc[TB];
  warp_dot<WT, TB>(w + r * K, x + b0 * K, K, nt, lane, vec, acc);
  if (lane == 0) {
    const float bb = bias != nullptr ? bias[r] : 0.0f;
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t < nt) {
        const float v = acc[t] + bb;
        out[(b0 + t) * ldo + col] = (relu && !(v > 0.0f)) ? 0.0f : v;
      }
    }
  }
}

template <typename WT, int TB>
__global__ void __launch_bounds__(kThreads)
    gated_kernel(const WT* __restrict__ wg, const WT* __restrict__ wu, int64_t K,
                 const float* __restrict__ x, int64_t B, Active a, GatedKind kind,
                 float* __restrict__ h, bool vec) {
  const int lane = threadIdx.x & 31;
  const int64_t j = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (j >= a.n) return;
  const int64_t b0 = int64_t(blockIdx.y) * TB;
  const int nt = int(B - b0 < TB ? B - b0 : TB);
  const int64_t ldh = a.n;
  int64_t r;
  bool live = resolve(a, j, r);
  float g[TB];
  if (live) {
    warp_dot<WT, TB>(wg + r * K, x + b0 * K, K, nt, lane, vec, g);
    if (kind != kSwiGLU) {  // warp-uniform: every lane holds the reduced sums
      bool any = false;
#pragma unroll
      for (int t = 0; t < TB; ++t) any = any || (t < nt && g[t] > 0.0f);
      live = any;
    }
  }
  if (!live) {
    if (lane < nt) h[(b0 + lane) * ldh + j] = 0.0f;
    return;
  }
  float u[TB];
  warp_dot<WT, TB>(wu + r * K, x + b0 * K, K, nt, lane, vec, u);
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t < nt) {
        float v;
        if (kind == kReGLU) {
          v = g[t] > 0.0f ? g[t] * u[t] : 0.0f;
        } else if (kind == kDReLU) {
          v = (g[t] > 0.0f && u[t] > 0.0f) ? g[t] * u[t] : 0.0f;
        } else {
          v = g[t] / (1.0f + __expf(-g[t])) * u[t];
        }
        h[(b0 + t) * ldh + j] = v;
      }
    }
  }
}

// A block owns kAxpyCols output columns (one 16-byte slice per lane; the 8 warps share
// the slices) and one split of the active neurons; warp w takes neurons j0 + w, j0 + w + 8,
// ... and issues the loads of kUnroll of them before using any (memory-level parallelism).
// The 8 warps' partial sums are combined in shared memory, so only one atomicAdd per
// column and split reaches global memory.
template <typename WT, int TB>
__global__ void __launch_bounds__(kThreads)
    axpy_kernel(const WT* __restrict__ wt, int64_t D, const float* __restrict__ coeff,
                int64_t ldc, int64_t B, Active a, const float* __restrict__ bias,
                int64_t rows_per_split, float* __restrict__ out, bool vec) {
  constexpr int N = Vec<WT>::N;
  __shared__ float part[kWarpsPerBlock][32 * N];
  const int V = vec ? N : 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col = (int64_t(blockIdx.x) * 32 + lane) * V;
  const int64_t j0 = int64_t(blockIdx.y) * rows_per_split;
  const int64_t j1 = j0 + rows_per_split < a.n ? j0 + rows_per_split : a.n;
  const int64_t b0 = int64_t(blockIdx.z) * TB;
  const int nt = int(B - b0 < TB ? B - b0 : TB);
  const bool in_range = col < D;
  float acc[TB][N];
#pragma unroll
  for (int t = 0; t < TB; ++t)
#pragma unroll
    for (int e = 0; e < N; ++e) acc[t][e] = 0.0f;
  constexpr int kStep = kWarpsPerBlock * kUnroll;
  for (int64_t j = j0 + warp; j < j1; j += kStep) {
    float wv[kUnroll][N];
    float c[kUnroll][TB];
    bool live[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t jj = j + int64_t(u) * kWarpsPerBlock;
      int64_t r = 0;
      live[u] = jj < j1 && resolve(a, jj, r);
      bool any = false;
#pragma unroll
      for (int t = 0; t < TB; ++t) {
        c[u][t] = (live[u] && t < nt) ? __ldg(coeff + (b0 + t) * ldc + jj) : 0.0f;
        any = any || c[u][t] != 0.0f;
      }
      live[u] = live[u] && any && in_range;  // warp-uniform apart from the column range
      if (live[u]) {
        const WT* src = wt + r * D + col;
        if (vec) {
          load_vec(src, wv[u]);
        } else {
          wv[u][0] = to_f(*src);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!live[u]) continue;
#pragma unroll
      for (int t = 0; t < TB; ++t)
#pragma unroll
        for (int e = 0; e < N; ++e)
          if (e < V) acc[t][e] += c[u][t] * wv[u][e];
    }
  }
  const bool add_bias = bias != nullptr && blockIdx.y == 0;
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    if (t >= nt) break;  // block-uniform
#pragma unroll
    for (int e = 0; e < N; ++e) part[warp][lane * N + e] = acc[t][e];
    __syncthreads();
    // thread i sums slot i (and i + kThreads ...) over the warps; slot = lane' * N + e
    for (int slot = threadIdx.x; slot < 32 * N; slot += kThreads) {
      const int l = slot / N, e = slot % N;
      const int64_t c_out = (int64_t(blockIdx.x) * 32 + l) * V + e;
      if (e < V && c_out < D) {
        float v = add_bias ? bias[c_out] : 0.0f;
#pragma unroll
        for (int w = 0; w < kWarpsPerBlock; ++w) v += part[w][slot];
        if (v != 0.0f) atomicAdd(out + (b0 + t) * D + c_out, v);
      }
    }
    __syncthreads();
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Tokens per warp (row kernels) or per block (axpy): 1 for decode, else tiles of 8.
int token_tile(int64_t B) { return B <= 1 ? 1 : kMaxTokens; }

unsigned cdiv(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// Expand LAUNCH (which uses WT and TB) for the weight type and the token tile.
#define PB_TILE(LAUNCH)               \
  if (token_tile(B) == 1) {           \
    constexpr int TB = 1;             \
    LAUNCH;                           \
  } else {                            \
    constexpr int TB = kMaxTokens;    \
    LAUNCH;                           \
  }
#define PB_DISPATCH(LAUNCH)                     \
  switch (wt) {                                 \
    case kF32: {                                \
      using WT = float;                         \
      PB_TILE(LAUNCH)                           \
      break;                                    \
    }                                           \
    case kF16: {                                \
      using WT = __half;                        \
      PB_TILE(LAUNCH)                           \
      break;                                    \
    }                                           \
    case kBF16: {                               \
      using WT = __nv_bfloat16;                 \
      PB_TILE(LAUNCH)                           \
      break;                                    \
    }                                           \
    default:                                    \
      return cudaErrorInvalidValue;             \
  }                                             \
  return cudaGetLastError();

size_t elem_size(WType wt) { return wt == kF32 ? 4 : 2; }

// Values per 16-byte load (Vec<WT>::N for the weight type).
int64_t vec_width(WType wt) { return int64_t(16 / elem_size(wt)); }

}  // namespace

cudaError_t launch_row(WType wt, const void* w, int64_t K, const float* x, int64_t B,
                       Active a, const float* bias, bool relu, float* out, int64_t ldo,
                       bool scatter, cudaStream_t stream) {
  if (a.n == 0 || B == 0) return cudaSuccess;
  const bool vec = K % vec_width(wt) == 0 && aligned(w, 16) && aligned(x, 16);
  const int tb = token_tile(B);
  const dim3 grid(cdiv(a.n, kWarpsPerBlock), cdiv(B, tb));
  PB_DISPATCH((row_kernel<WT, TB><<<grid, kThreads, 0, stream>>>(
      static_cast<const WT*>(w), K, x, B, a, bias, relu, out, ldo, scatter, vec)))
}

cudaError_t launch_gated(WType wt, const void* w_gate, const void* w_up, int64_t K,
                         const float* x, int64_t B, Active a, GatedKind kind, float* h,
                         cudaStream_t stream) {
  if (a.n == 0 || B == 0) return cudaSuccess;
  const bool vec = K % vec_width(wt) == 0 && aligned(w_gate, 16) && aligned(w_up, 16) &&
                   aligned(x, 16);
  const int tb = token_tile(B);
  const dim3 grid(cdiv(a.n, kWarpsPerBlock), cdiv(B, tb));
  PB_DISPATCH((gated_kernel<WT, TB><<<grid, kThreads, 0, stream>>>(
      static_cast<const WT*>(w_gate), static_cast<const WT*>(w_up), K, x, B, a, kind, h, vec)))
}

cudaError_t launch_axpy(WType wt, const void* w_t, int64_t D, const float* coeff, int64_t ldc,
                        int64_t B, Active a, const float* bias, float* out, int num_sms,
                        cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  const bool vec = D % vec_width(wt) == 0 && aligned(w_t, 16);
  const int tb = token_tile(B);
  const int64_t cols_per_block = 32 * (vec ? vec_width(wt) : 1);
  const unsigned gx = cdiv(D, cols_per_block), gz = cdiv(B, tb);
  // Enough blocks to fill the GPU (kBlocksPerSM per SM), each with >= kMinRowsPerSplit
  // neurons (fewer splits: fewer atomics on the output).
  const int64_t n = a.n > 0 ? a.n : 1;
  int64_t splits = (int64_t(num_sms > 0 ? num_sms : 1) * kBlocksPerSM + gx * gz - 1) / (gx * gz);
  const int64_t max_splits = (n + kMinRowsPerSplit - 1) / kMinRowsPerSplit;
  if (splits > max_splits) splits = max_splits;
  if (splits < 1) splits = 1;
  const int64_t rows_per_split = (n + splits - 1) / splits;
  const dim3 grid(gx, unsigned(splits), gz);
  PB_DISPATCH((axpy_kernel<WT, TB><<<grid, kThreads, 0, stream>>>(
      static_cast<const WT*>(w_t), D, coeff, ldc, B, a, bias, rows_per_split, out, vec)))
}

#undef PB_DISPATCH
#undef PB_TILE

}  // namespace pbcuda
