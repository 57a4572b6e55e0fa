// torch binding of the CUDA kernels (torch.ops.powerbench_cuda.*): argument checks, the
// current stream, output and work buffers. No conversion kernels: every tensor is handed to
// the kernels in its own dtype (fp32 / fp16 / bf16; ids int32 / int64) and the result is
// allocated in the caller's dtype, so an op is its kernels plus at most one cudaMemsetAsync
// (scattered row output, or the axpy split workspace). The active set stays on the device:
// an id list, or predictor scores + threshold evaluated inside the kernels.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sparse_cuda_kernels.cuh"

namespace {

bool kernel_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

pbcuda::DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return pbcuda::kF16;
    case at::kBFloat16: return pbcuda::kBF16;
    default: return pbcuda::kF32;
  }
}

pbcuda::DType weight_type(const at::Tensor& w, const char* name) {
  TORCH_CHECK_VALUE(w.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK_VALUE(w.dim() == 2 && w.is_contiguous(), name,
                    " must be a contiguous 2-D [neurons, features] tensor");
  TORCH_CHECK_TYPE(kernel_dtype(w.scalar_type()), name,
                   " must be float32, float16 or bfloat16, got ", w.scalar_type());
  return dtype_of(w.scalar_type());
}

// A floating operand in a dtype the kernels read (others, e.g. float64, go through fp32),
// contiguous (a no-op for the usual contiguous tensor).
at::Tensor readable(const at::Tensor& t) {
  const at::Tensor c = kernel_dtype(t.scalar_type()) ? t : t.to(at::kFloat);
  return c.contiguous();
}

at::Tensor as_2d(const at::Tensor& t, int64_t cols, const char* name) {
  TORCH_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK_TYPE(t.is_floating_point(), name, " must be a floating-point tensor");
  TORCH_CHECK_VALUE(t.dim() == 2 && t.size(1) == cols && t.size(0) >= 1, name,
                    " must be [batch >= 1, ", std::to_string(cols), "]");
  return readable(t);
}

// x for the row kernels: fp32 or the weights' dtype as it is; any other dtype (e.g. fp16 x
// with bf16 weights, rare) goes through fp32.
at::Tensor row_x(const at::Tensor& x, const at::Tensor& w, const char* name) {
  const at::Tensor xc = as_2d(x, w.size(1), name);
  const bool direct = xc.scalar_type() == at::kFloat || xc.scalar_type() == w.scalar_type();
  return direct ? xc : xc.to(at::kFloat);
}

// Results are written in the caller's dtype (`like`'s) where the kernels can store it, else in
// fp32 and converted (float64 inputs only).
at::TensorOptions result_options(const at::Tensor& like) {
  return like.options().dtype(kernel_dtype(like.scalar_type()) ? like.scalar_type() : at::kFloat);
}

at::Tensor as_dtype_of(const at::Tensor& out, const at::Tensor& like) {
  return out.scalar_type() == like.scalar_type() ? out : out.to(like.scalar_type());
}

pbcuda::Typed typed(const at::Tensor& t) { return {t.data_ptr(), dtype_of(t.scalar_type())}; }

// Keeps the tensors handed to the kernels alive while they are queued.
struct ActiveSet {
  at::Tensor ids, scores;
  pbcuda::Active a{nullptr, false, 0, {nullptr, pbcuda::kF32}, 0.0f};
};

ActiveSet active_set(const std::optional<at::Tensor>& idx, const std::optional<at::Tensor>& scores,
                     double threshold, int64_t limit) {
  ActiveSet s;
  if (idx.has_value()) {
    TORCH_CHECK_TYPE(idx->scalar_type() == at::kInt || idx->scalar_type() == at::kLong,
                     "idx must be int32 or int64, got ", idx->scalar_type());
    TORCH_CHECK_VALUE(idx->dim() == 1 && idx->is_cuda(), "idx must be a 1-D CUDA tensor");
    s.ids = idx->contiguous();
    s.a.idx = s.ids.data_ptr();
    s.a.idx64 = s.ids.scalar_type() == at::kLong;
    s.a.n = s.ids.numel();
  } else {
    TORCH_CHECK_VALUE(scores.has_value(), "give idx or scores");
    TORCH_CHECK_VALUE(scores->is_cuda() && scores->dim() == 1 && scores->size(0) == limit,
                      "scores must be a CUDA tensor of shape [", std::to_string(limit), "]");
    TORCH_CHECK_TYPE(scores->is_floating_point(), "scores must be a floating-point tensor");
    s.scores = readable(*scores);
    s.a.n = limit;
    s.a.scores = typed(s.scores);
    s.a.threshold = static_cast<float>(threshold);
  }
  return s;
}

pbcuda::Typed opt_vec(const std::optional<at::Tensor>& v, at::Tensor& keep, int64_t len,
                      const char* name) {
  if (!v.has_value()) return {nullptr, pbcuda::kF32};
  TORCH_CHECK_VALUE(v->is_cuda() && v->dim() == 1 && v->size(0) == len, name,
                    " must be a CUDA tensor of shape [", std::to_string(len), "]");
  TORCH_CHECK_TYPE(v->is_floating_point(), name, " must be a floating-point tensor");
  keep = readable(*v);
  return typed(keep);
}

void ok(cudaError_t err) {
  TORCH_CHECK(err == cudaSuccess, "powerbench CUDA kernel launch failed: ",
              cudaGetErrorString(err));
}

int num_sms(int device) {
  static std::vector<int> cached;  // per device, read once (ops run under the GIL or not:
  static std::mutex lock;          // the attribute never changes, the lock guards the vector)
  const std::lock_guard<std::mutex> hold(lock);
  if (device >= int(cached.size())) cached.resize(device + 1, 0);
  if (cached[device] == 0) {
    ok(cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device));
  }
  return cached[device];
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

at::Tensor row(const at::Tensor& w, const at::Tensor& x, const std::optional<at::Tensor>& idx,
               const std::optional<at::Tensor>& scores, double threshold,
               const std::optional<at::Tensor>& bias, bool relu, bool scatter) {
  const c10::cuda::CUDAGuard guard(w.device());
  const pbcuda::DType wt = weight_type(w, "w");
  const int64_t N = w.size(0), K = w.size(1);
  const at::Tensor xc = row_x(x, w, "x");
  const ActiveSet s = active_set(idx, scores, threshold, N);
  at::Tensor bias_keep;
  const pbcuda::Typed b = opt_vec(bias, bias_keep, N, "bias");
  const bool full = scatter || !idx.has_value();
  const int64_t B = xc.size(0), cols = full ? N : s.a.n;
  at::Tensor out = at::empty({B, cols}, result_options(x));
  // Threshold mode writes every column itself; scattered ids need a zeroed output.
  if (scatter && idx.has_value() && out.numel() > 0) {
    ok(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream()));
  }
  ok(pbcuda::launch_row(wt, w.data_ptr(), K, dtype_of(xc.scalar_type()), xc.data_ptr(), B, s.a,
                        b, relu, dtype_of(out.scalar_type()), out.data_ptr(), cols, full,
                        stream()));
  return as_dtype_of(out, x);
}

// The fp32 split workspace of an axpy over `s` into [B, D] (undefined: none needed).
at::Tensor axpy_workspace(const at::Tensor& w_t, int64_t B, const ActiveSet& s,
                          const at::TensorOptions& like) {
  const size_t bytes = pbcuda::axpy_workspace_bytes(weight_type(w_t, "w_t"), w_t.size(1), B,
                                                    s.a.n, num_sms(w_t.get_device()));
  return bytes > 0 ? at::empty({int64_t(bytes)}, like.dtype(at::kByte)) : at::Tensor();
}

// y = coeff-weighted rows of w_t (+ bias), in `out_options`' dtype. `ws` from
// axpy_workspace; `after_row`: the row kernel just launched cleared it and writes coeff.
at::Tensor axpy_into(const at::Tensor& w_t, const pbcuda::Typed coeff, int64_t ldc, int64_t B,
                     const ActiveSet& s, const std::optional<at::Tensor>& bias,
                     const at::TensorOptions& out_options, const at::Tensor& ws, bool after_row) {
  const pbcuda::DType wt = weight_type(w_t, "w_t");
  const int64_t D = w_t.size(1);
  at::Tensor bias_keep;
  const pbcuda::Typed b = opt_vec(bias, bias_keep, D, "bias");
  at::Tensor out = at::empty({B, D}, out_options);
  ok(pbcuda::launch_axpy(wt, w_t.data_ptr(), D, coeff, ldc, B, s.a, b,
                         dtype_of(out.scalar_type()), out.data_ptr(),
                         ws.defined() ? ws.data_ptr() : nullptr, after_row,
                         num_sms(w_t.get_device()), stream()));
  return out;
}

at::Tensor axpy(const at::Tensor& w_t, const at::Tensor& coeff,
                const std::optional<at::Tensor>& idx, const std::optional<at::Tensor>& scores,
                double threshold, const std::optional<at::Tensor>& bias) {
  const c10::cuda::CUDAGuard guard(w_t.device());
  weight_type(w_t, "w_t");
  const ActiveSet s = active_set(idx, scores, threshold, w_t.size(0));
  const at::Tensor cf = as_2d(coeff, s.a.n, "coeffs");
  const at::TensorOptions opts = result_options(coeff);
  const at::Tensor ws = axpy_workspace(w_t, cf.size(0), s, opts);
  return as_dtype_of(
      axpy_into(w_t, typed(cf), cf.size(1), cf.size(0), s, bias, opts, ws, false), coeff);
}

// The FFNs: the row kernel (which also clears the axpy workspace), then the axpy over h.
at::Tensor ffn_relu(const at::Tensor& x, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
                    const at::Tensor& w2_t, const std::optional<at::Tensor>& b2,
                    const std::optional<at::Tensor>& idx, const std::optional<at::Tensor>& scores,
                    double threshold) {
  const c10::cuda::CUDAGuard guard(w1.device());
  const pbcuda::DType wt = weight_type(w1, "w1");
  weight_type(w2_t, "w2_t");
  TORCH_CHECK_VALUE(w1.sizes() == w2_t.sizes() && w1.scalar_type() == w2_t.scalar_type(),
                    "w1 and w2_t must both be [d_ffn, d_model] of one dtype");
  const int64_t N = w1.size(0), K = w1.size(1);
  const at::Tensor xc = row_x(x, w1, "x");
  const ActiveSet s = active_set(idx, scores, threshold, N);
  at::Tensor b1_keep;
  const pbcuda::Typed b = opt_vec(b1, b1_keep, N, "b1");
  const int64_t B = xc.size(0);
  const at::TensorOptions opts = result_options(x);
  const at::Tensor ws = axpy_workspace(w2_t, B, s, opts);
  at::Tensor h = at::empty({B, s.a.n}, xc.options().dtype(at::kFloat));
  ok(pbcuda::launch_row(wt, w1.data_ptr(), K, dtype_of(xc.scalar_type()), xc.data_ptr(), B,
                        s.a, b, /*relu=*/true, pbcuda::kF32, h.data_ptr(), s.a.n,
                        /*scatter=*/false, stream(), ws.defined() ? ws.data_ptr() : nullptr,
                        ws.defined() ? size_t(ws.numel()) : 0));
  return as_dtype_of(axpy_into(w2_t, typed(h), s.a.n, B, s, b2, opts, ws, true), x);
}

at::Tensor ffn_gated(const at::Tensor& x, const at::Tensor& wg, const at::Tensor& wu,
                     const at::Tensor& wd_t, const std::optional<at::Tensor>& idx,
                     const std::optional<at::Tensor>& scores, double threshold, int64_t kind) {
  const c10::cuda::CUDAGuard guard(wg.device());
  const pbcuda::DType wt = weight_type(wg, "w_gate");
  weight_type(wu, "w_up");
  weight_type(wd_t, "w_down_t");
  TORCH_CHECK_VALUE(wg.sizes() == wu.sizes() && wg.sizes() == wd_t.sizes() &&
                        wg.scalar_type() == wu.scalar_type() &&
                        wg.scalar_type() == wd_t.scalar_type(),
                    "w_gate, w_up, w_down_t must all be [d_ffn, d_model] of one dtype");
  TORCH_CHECK_VALUE(kind >= 0 && kind <= 2, "unknown gated kind ", std::to_string(kind));
  const int64_t N = wg.size(0), K = wg.size(1);
  const at::Tensor xc = row_x(x, wg, "x");
  const ActiveSet s = active_set(idx, scores, threshold, N);
  const int64_t B = xc.size(0);
  const at::TensorOptions opts = result_options(x);
  const at::Tensor ws = axpy_workspace(wd_t, B, s, opts);
  at::Tensor h = at::empty({B, s.a.n}, xc.options().dtype(at::kFloat));
  ok(pbcuda::launch_gated(wt, wg.data_ptr(), wu.data_ptr(), K, dtype_of(xc.scalar_type()),
                          xc.data_ptr(), B, s.a, static_cast<pbcuda::GatedKind>(kind),
                          h.data_ptr<float>(), stream(), ws.defined() ? ws.data_ptr() : nullptr,
                          ws.defined() ? size_t(ws.numel()) : 0));
  return as_dtype_of(axpy_into(wd_t, typed(h), s.a.n, B, s, std::nullopt, opts, ws, true), x);
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
