// torch binding of the CUDA kernels (torch.ops.powerbench_cuda.*): argument checks, the
// current stream, fp32 work buffers. The active set stays on the device: either an id list
// or predictor scores + threshold evaluated inside the kernels (no device->host copy).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>

#include "sparse_cuda_kernels.cuh"

namespace {

pbcuda::WType weight_type(const at::Tensor& w, const char* name) {
  TORCH_CHECK_VALUE(w.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK_VALUE(w.dim() == 2 && w.is_contiguous(), name,
                    " must be a contiguous 2-D [neurons, features] tensor");
  switch (w.scalar_type()) {
    case at::kFloat: return pbcuda::kF32;
    case at::kHalf: return pbcuda::kF16;
    case at::kBFloat16: return pbcuda::kBF16;
    default:
      TORCH_CHECK_TYPE(false, name, " must be float32, float16 or bfloat16, got ",
                       w.scalar_type());
  }
  return pbcuda::kF32;
}

at::Tensor as_f32_2d(const at::Tensor& t, int64_t cols, const char* name) {
  TORCH_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK_VALUE(t.dim() == 2 && t.size(1) == cols && t.size(0) >= 1, name,
                    " must be [batch >= 1, ", cols, "]");
  return t.to(at::kFloat).contiguous();
}

// Keeps the converted tensors alive while the kernels are queued.
struct ActiveSet {
  at::Tensor ids, scores;
  pbcuda::Active a{nullptr, 0, nullptr, 0.0f};
};

ActiveSet active_set(const std::optional<at::Tensor>& idx, const std::optional<at::Tensor>& scores,
                     double threshold, int64_t limit) {
  ActiveSet s;
  if (idx.has_value()) {
    TORCH_CHECK_TYPE(idx->scalar_type() == at::kInt || idx->scalar_type() == at::kLong,
                     "idx must be int32 or int64, got ", idx->scalar_type());
    TORCH_CHECK_VALUE(idx->dim() == 1 && idx->is_cuda(), "idx must be a 1-D CUDA tensor");
    s.ids = idx->to(at::kInt).contiguous();
    s.a = {s.ids.data_ptr<int32_t>(), s.ids.numel(), nullptr, 0.0f};
  } else {
    TORCH_CHECK_VALUE(scores.has_value(), "give idx or scores");
    TORCH_CHECK_VALUE(scores->is_cuda() && scores->dim() == 1 && scores->size(0) == limit,
                      "scores must be a CUDA tensor of shape [", limit, "]");
    s.scores = scores->to(at::kFloat).contiguous();
    s.a = {nullptr, limit, s.scores.data_ptr<float>(), static_cast<float>(threshold)};
  }
  return s;
}

const float* opt_vec(const std::optional<at::Tensor>& v, at::Tensor& keep, int64_t len,
                     const char* name) {
  if (!v.has_value()) return nullptr;
  TORCH_CHECK_VALUE(v->is_cuda() && v->dim() == 1 && v->size(0) == len, name,
                    " must be a CUDA tensor of shape [", len, "]");
  keep = v->to(at::kFloat).contiguous();
  return keep.data_ptr<float>();
}

void ok(cudaError_t err) {
  TORCH_CHECK(err == cudaSuccess, "powerbench CUDA kernel launch failed: ",
              cudaGetErrorString(err));
}

int num_sms() {
  int device = 0, sms = 0;
  ok(cudaGetDevice(&device));
  ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

at::Tensor row(const at::Tensor& w, const at::Tensor& x, const std::optional<at::Tensor>& idx,
               const std::optional<at::Tensor>& scores, double threshold,
               const std::optional<at::Tensor>& bias, bool relu, bool scatter) {
  const c10::cuda::CUDAGuard guard(w.device());
  const pbcuda::WType wt = weight_type(w, "w");
  const int64_t N = w.size(0), K = w.size(1);
  const at::Tensor xf = as_f32_2d(x, K, "x");
  const ActiveSet s = active_set(idx, scores, threshold, N);
  at::Tensor bias_keep;
  const float* b = opt_vec(bias, bias_keep, N, "bias");
  const bool full = scatter || !idx.has_value();
  const int64_t B = xf.size(0), cols = full ? N : s.a.n;
  // Threshold mode writes every column itself; scattered ids need a zeroed output.
  at::Tensor out = (scatter && idx.has_value()) ? at::zeros({B, cols}, xf.options())
                                                : at::empty({B, cols}, xf.options());
  ok(pbcuda::launch_row(wt, w.data_ptr(), K, xf.data_ptr<float>(), B, s.a, b, relu,
                        out.data_ptr<float>(), cols, full, stream()));
  return out;
}

at::Tensor axpy_into(const at::Tensor& w_t, const at::Tensor& coeff, const ActiveSet& s,
                     const std::optional<at::Tensor>& bias) {
  const pbcuda::WType wt = weight_type(w_t, "w_t");
  const int64_t D = w_t.size(1);
  const at::Tensor cf = as_f32_2d(coeff, s.a.n, "coeffs");
  at::Tensor bias_keep;
  const float* b = opt_vec(bias, bias_keep, D, "bias");
  at::Tensor out = at::zeros({cf.size(0), D}, cf.options());
  ok(pbcuda::launch_axpy(wt, w_t.data_ptr(), D, cf.data_ptr<float>(), cf.size(1), cf.size(0),
                         s.a, b, out.data_ptr<float>(), num_sms(),
                         stream()));
  return out;
}

at::Tensor axpy(const at::Tensor& w_t, const at::Tensor& coeff,
                const std::optional<at::Tensor>& idx, const std::optional<at::Tensor>& scores,
                double threshold, const std::optional<at::Tensor>& bias) {
  const c10::cuda::CUDAGuard guard(w_t.device());
  weight_type(w_t, "w_t");
  return axpy_into(w_t, coeff, active_set(idx, scores, threshold, w_t.size(0)), bias);
}

at::Tensor ffn_relu(const at::Tensor& x, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
                    const at::Tensor& w2_t, const std::optional<at::Tensor>& b2,
                    const std::optional<at::Tensor>& idx, const std::optional<at::Tensor>& scores,
                    double threshold) {
  const c10::cuda::CUDAGuard guard(w1.device());
  const pbcuda::WType wt = weight_type(w1, "w1");
  weight_type(w2_t, "w2_t");
  TORCH_CHECK_VALUE(w1.sizes() == w2_t.sizes() && w1.scalar_type() == w2_t.scalar_type(),
                    "w1 and w2_t must both be [d_ffn, d_model] of one dtype");
  const int64_t N = w1.size(0), K = w1.size(1);
  const at::Tensor xf = as_f32_2d(x, K, "x");
  const ActiveSet s = active_set(idx, scores, threshold, N);
  at::Tensor b1_keep;
  const float* b = opt_vec(b1, b1_keep, N, "b1");
  at::Tensor h = at::empty({xf.size(0), s.a.n}, xf.options());
  ok(pbcuda::launch_row(wt, w1.data_ptr(), K, xf.data_ptr<float>(), xf.size(0), s.a, b,
                        /*relu=*/true, h.data_ptr<float>(), s.a.n, /*scatter=*/false,
                        stream()));
  return axpy_into(w2_t, h, s, b2);
}

at::Tensor ffn_gated(const at::Tensor& x, const at::Tensor& wg, const at::Tensor& wu,
                     const at::Tensor& wd_t, const std::optional<at::Tensor>& idx,
                     const std::optional<at::Tensor>& scores, double threshold, int64_t kind) {
  const c10::cuda::CUDAGuard guard(wg.device());
  const pbcuda::WType wt = weight_type(wg, "w_gate");
  weight_type(wu, "w_up");
  weight_type(wd_t, "w_down_t");
  TORCH_CHECK_VALUE(wg.sizes() == wu.sizes() && wg.sizes() == wd_t.sizes() &&
                        wg.scalar_type() == wu.scalar_type() &&
                        wg.scalar_type() == wd_t.scalar_type(),
                    "w_gate, w_up, w_down_t must all be [d_ffn, d_model] of one dtype");
  TORCH_CHECK_VALUE(kind >= 0 && kind <= 2, "unknown gated kind ", kind);
  const int64_t N = wg.size(0), K = wg.size(1);
  const at::Tensor xf = as_f32_2d(x, K, "x");
  const ActiveSet s = active_set(idx, scores, threshold, N);
  at::Tensor h = at::empty({xf.size(0), s.a.n}, xf.options());
  ok(pbcuda::launch_gated(wt, wg.data_ptr(), wu.data_ptr(), K, xf.data_ptr<float>(), xf.size(0),
                          s.a, static_cast<pbcuda::GatedKind>(kind), h.data_ptr<float>(),
                          stream()));
  return axpy_into(wd_t, h, s, std::nullopt);
}

}  // namespace

TORCH_LIBRARY(powerbench_cuda, m) {
  m.def("row(Tensor w, Tensor x, Tensor? idx, Tensor? scores, float threshold, Tensor? bias,"
        " bool relu, bool scatter) -> Tensor",
        &row);
  m.def("axpy(Tensor w_t, Tensor coeffs, Tensor? idx, Tensor? scores, float threshold,"
        " Tensor? bias) -> Tensor",
        &axpy);
  m.def("ffn_relu(Tensor x, Tensor w1, Tensor? b1, Tensor w2_t, Tensor? b2, Tensor? idx,"
        " Tensor? scores, float threshold) -> Tensor",
        &ffn_relu);
  m.def("ffn_gated(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down_t, Tensor? idx,"
        " Tensor? scores, float threshold, int kind) -> Tensor",
        &ffn_gated);
}
