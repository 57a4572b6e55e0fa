// Neuron-aware sparse kernels for the CPU: raw pointers, no torch headers.
//
// Layout conventions (row-major, "neuron-major"):
//   row  : W  [N, K]  one neuron per row (fc1, gate, up as stored by HF)
//   axpy : Wt [N, D]  the down projection stored transposed, one neuron per row
//   x    : [B, K] fp32, coeff: [B, ldc] fp32, out: [B, ldo] fp32
// Weights are fp32, fp16 (IEEE half) or bf16; accumulation is always fp32.
#pragma once

#include <cstdint>

namespace pbops {

enum WType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum GatedKind : int { kReGLU = 0, kDReLU = 1, kSwiGLU = 2 };

// out[b, col(j)] = act(W[idx[j], :] . x[b, :] + bias[idx[j]]) for j < n,
// col(j) = idx[j] when scatter (out must be pre-zeroed), else j.
void row(WType wt, const void* w, int64_t K, const float* x, int64_t B, const int64_t* idx,
         int64_t n, const float* bias, bool relu, float* out, int64_t ldo, bool scatter,
         int threads);

// out[b, :] += sum_j coeff[b, j] * Wt[idx[j], :]; neurons whose coefficients are all
// zero for every token are skipped (their rows are never read).
void axpy(WType wt, const void* w_t, int64_t D, const float* coeff, int64_t ldc, int64_t B,
          const int64_t* idx, int64_t n, float* out, int threads);

// h[b, j] = act(Wg[idx[j]] . x[b]) * f(Wu[idx[j]] . x[b]) for the gated FFNs; for ReGLU and
// dReLU the up row is not read when the gate is <= 0 for every token.
void gated_hidden(WType wt, const void* w_gate, const void* w_up, int64_t K, const float* x,
                  int64_t B, const int64_t* idx, int64_t n, GatedKind kind, float* h,
                  int threads);

// Dense matrix-vector / small-batch product y = x W^T + b: out[b, n] = W[n, :] . x[b, :] +
// bias[n] for every n < N. W [N, K] row-major; x fp32 [B, K]; out [B, ldo] of type `ot`
// (fp32, fp16 or bf16; converted once per element). Rows are streamed four at a time (two
// accumulators each, each a contiguous run prefetched ahead) and claimed by the pool in
// chunks of kRowGroup runs of ~64 KiB (see sparse_cpu_kernels_impl.h).
void dense(WType wt, const void* w, int64_t N, int64_t K, const float* x, int64_t B,
           const float* bias, WType ot, void* out, int64_t ldo, int threads);

// a[i] = act(a[i]) in place for i < n (fp32): ReLU for ReGLU and dReLU, SiLU for SwiGLU
// (the vector exp of the fused decode kernels). The gate of the CATS threshold FFN.
void activate(float* a, int64_t n, GatedKind kind);

// dst[i] = float(src[i]) for i < n (src of type t).
void to_float(WType t, const void* src, int64_t n, float* dst);

// dst[i] = T(src[i]) for i < n (dst of type t, rounded to nearest even as the kernels round).
void from_float(WType t, const float* src, int64_t n, void* dst);

// Sum of buf[0..n) read with all threads (memory read-bandwidth probe).
double read_sum(const float* buf, int64_t n, int threads);

// Read-only gather probe (gather_probe_impl.h): reads the rows idx[0..n) (row_len elements
// of elem_bytes each) of a row-major matrix with plain vector loads on `threads` workers,
// in the operators' row-slot schedule (mode 0) or as merged runs of adjacent rows (mode 1),
// and returns the sum modulo 2^32 of each row's bytes as little-endian 32-bit words (a last
// partial word zero-padded). The ceiling of a sparse operator's reads on this machine.
uint32_t gather_probe(const void* w, int64_t row_len, int64_t elem_bytes, const int64_t* idx,
                      int64_t n, int mode, int threads);

// Distinct workers that took part in a probe job run with `threads` (tests the pool).
int threads_used(int threads);

}  // namespace pbops
