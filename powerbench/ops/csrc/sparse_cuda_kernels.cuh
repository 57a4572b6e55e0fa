// Neuron-aware sparse kernels for NVIDIA GPUs: plain CUDA with raw pointers (no torch
// headers), so `nvcc -c sparse_cuda_kernels.cu` compiles without torch.
//
// Same layouts as the CPU kernels: W [N, K] neuron-major rows, the down projection stored
// transposed Wt [N, D]; x [B, K] fp32; weights fp32 / fp16 / bf16, fp32 accumulation.
// The active set lives on the device: an id list, or (threshold mode, idx == nullptr) the
// predictor scores, tested inside the kernels, so no host round trip is needed per layer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pbcuda {

enum WType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum GatedKind : int { kReGLU = 0, kDReLU = 1, kSwiGLU = 2 };

struct Active {
  const int32_t* idx;   // device ids, n of them; nullptr selects threshold mode
  int64_t n;            // ids in idx, or N (every neuron is examined) in threshold mode
  const float* scores;  // threshold mode: neuron i is active iff scores[i] > threshold
  float threshold;
};

// out[b, col] = act(W[r] . x[b] + bias[r]) for active r; col = j (compact), r (scatter, out
// pre-zeroed). In threshold mode col = r and inactive neurons get an explicit 0.
cudaError_t launch_row(WType wt, const void* w, int64_t K, const float* x, int64_t B,
                       Active a, const float* bias, bool relu, float* out, int64_t ldo,
                       bool scatter, cudaStream_t stream);

// h[b, j] = act(Wg[r] . x[b]) * f(Wu[r] . x[b]), h is [B, a.n]; the up row is skipped when
// the gate is <= 0 for every token (ReGLU, dReLU).
cudaError_t launch_gated(WType wt, const void* w_gate, const void* w_up, int64_t K,
                         const float* x, int64_t B, Active a, GatedKind kind, float* h,
                         cudaStream_t stream);

// out[b, :] += sum_j coeff[b, j] * Wt[r_j, :] (+ bias once if given); out [B, D] fp32 must be
// zeroed. Neurons are split across blocks, partial sums are combined with atomicAdd.
cudaError_t launch_axpy(WType wt, const void* w_t, int64_t D, const float* coeff, int64_t ldc,
                        int64_t B, Active a, const float* bias, float* out, int num_sms,
                        cudaStream_t stream);

}  // namespace pbcuda
