// Neuron-aware sparse kernels for NVIDIA GPUs: plain CUDA with raw pointers (no torch
// headers), so `nvcc -c sparse_cuda_kernels.cu` compiles without torch.
//
// Same layouts as the CPU kernels: W [N, K] neuron-major rows, the down projection stored
// transposed Wt [N, D]. Every operand is read in its own dtype (fp32 / fp16 / bf16, converted
// in registers; ids int32 or int64) and results are written in the caller's dtype, so a call
// launches no conversion kernels; accumulation is fp32. The active set lives on the device:
// an id list, or (threshold mode, idx == nullptr) the predictor scores, tested inside the
// kernels, so no host round trip is needed per layer.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pbcuda {

enum DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum GatedKind : int { kReGLU = 0, kDReLU = 1, kSwiGLU = 2 };

// A small operand read or written element by element (bias, scores, coefficients, outputs).
struct Typed {
  const void* p;  // nullptr: absent
  DType t;
};

struct Active {
  const void* idx;  // device ids (int32, or int64 if idx64), n of them; nullptr: threshold mode
  bool idx64;
  int64_t n;        // ids in idx, or N (every neuron is examined) in threshold mode
  Typed scores;     // threshold mode: neuron i is active iff scores[i] > threshold
  float threshold;
};

// x (row, gated) is fp32 or of the weights' dtype (cudaErrorInvalidValue otherwise).
// `zero` (optional): zero_bytes (a multiple of 4) at zero are cleared by the same launch,
// e.g. the workspace of the axpy that follows (launch_axpy(..., after_row_kernel = true)).
// out[b, col] = act(W[r] . x[b] + bias[r]) for active r, written as `ot`; col = j (compact),
// r (scatter: out pre-zeroed). In threshold mode col = r and inactive neurons get a 0.
cudaError_t launch_row(DType wt, const void* w, int64_t K, DType xt, const void* x, int64_t B,
                       Active a, Typed bias, bool relu, DType ot, void* out, int64_t ldo,
                       bool scatter, cudaStream_t stream, void* zero = nullptr,
                       size_t zero_bytes = 0);

// h[b, j] = act(Wg[r] . x[b]) * f(Wu[r] . x[b]) in fp32, h is [B, a.n]; the up row is skipped
// when the gate is <= 0 for every token (ReGLU, dReLU).
cudaError_t launch_gated(DType wt, const void* w_gate, const void* w_up, int64_t K, DType xt,
                         const void* x, int64_t B, Active a, GatedKind kind, float* h,
                         cudaStream_t stream, void* zero = nullptr, size_t zero_bytes = 0);

// Bytes of device workspace launch_axpy needs for these sizes (0: none; pass nullptr). A
// multiple of 4.
size_t axpy_workspace_bytes(DType wt, int64_t D, int64_t B, int64_t n, int num_sms);

// out[b, :] = sum_j coeff[b, j] * Wt[r_j, :] (+ bias), written as `ot` (no pre-zeroing).
// Neurons are split across blocks; with several splits the partial sums meet in an fp32
// workspace and the last block of each column tile to finish writes the result.
// after_row_kernel: the previous launch on `stream` is this FFN's launch_row / launch_gated,
// which cleared the workspace and writes `coeff`; the axpy is then launched as its
// programmatic dependent (sm_90+: its launch overlaps the row kernel's tail). Otherwise the
// workspace is zeroed here with one cudaMemsetAsync.
cudaError_t launch_axpy(DType wt, const void* w_t, int64_t D, Typed coeff, int64_t ldc,
                        int64_t B, Active a, Typed bias, DType ot, void* out, void* workspace,
                        bool after_row_kernel, int num_sms, cudaStream_t stream);

}  // namespace pbcuda
