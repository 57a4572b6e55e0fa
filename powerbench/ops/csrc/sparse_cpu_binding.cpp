// torch binding of the CPU kernels: argument checks, dtype dispatch, registered as
// torch.ops.powerbench_cpu.* (no pybind11, so the extension compiles quickly).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "sparse_cpu_kernels.h"

namespace {

pbops::WType weight_type(const at::Tensor& w, const char* name) {
  switch (w.scalar_type()) {
    case at::kFloat: return pbops::kF32;
    case at::kHalf: return pbops::kF16;
    case at::kBFloat16: return pbops::kBF16;
    default:
      TORCH_CHECK_TYPE(false, name, " must be float32, float16 or bfloat16, got ",
                       w.scalar_type());
  }
  return pbops::kF32;
}

void check_weight(const at::Tensor& w, const char* name) {
  TORCH_CHECK_VALUE(w.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK_VALUE(w.dim() == 2, name, " must be 2-D [neurons, features], got ", w.dim(),
                    "-D");
  TORCH_CHECK_VALUE(w.is_contiguous(), name, " must be contiguous (prepare weights once)");
}

// fp32 contiguous [B, K] copy of x (a no-op for fp32 contiguous input).
at::Tensor as_f32_2d(const at::Tensor& t, int64_t cols, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 2, name, " must be 2-D [batch, features]");
  TORCH_CHECK_VALUE(t.size(1) == cols, name, " has ", t.size(1), " features, expected ", cols);
  TORCH_CHECK_VALUE(t.size(0) >= 1, name, " must hold at least one token");
  return t.to(at::kFloat).contiguous();
}

// Validated int64 copy of the active list; `check` verifies range and uniqueness in O(n).
at::Tensor active_ids(const at::Tensor& idx, int64_t limit, bool check) {
  TORCH_CHECK_TYPE(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt,
                   "idx must be int32 or int64, got ", idx.scalar_type());
  TORCH_CHECK_VALUE(idx.dim() == 1, "idx must be 1-D, got ", idx.dim(), "-D");
  at::Tensor ids = idx.to(at::kLong).contiguous();
  if (check) {
    const int64_t* p = ids.data_ptr<int64_t>();
    const int64_t n = ids.numel();
    std::vector<uint8_t> seen(static_cast<size_t>(limit), 0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = p[j];
      TORCH_CHECK_INDEX(v >= 0 && v < limit, "idx[", j, "] = ", v, " is out of range for ",
                        limit, " neurons");
      TORCH_CHECK_VALUE(!seen[v], "idx holds neuron ", v, " twice (again at position ", j,
                        "); the active set must not repeat neurons");
      seen[v] = 1;
    }
  }
  return ids;
}

const float* opt_bias(const std::optional<at::Tensor>& bias, at::Tensor& keep, int64_t len,
                      const char* name) {
  if (!bias.has_value()) return nullptr;
  TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == len, name, " must have shape [", len,
                    "]");
  keep = bias->to(at::kFloat).contiguous();
  return keep.data_ptr<float>();
}

int threads() { return at::get_num_threads(); }

at::Tensor row(const at::Tensor& w, const at::Tensor& x, const at::Tensor& idx,
               const std::optional<at::Tensor>& bias, bool relu, bool scatter, bool check) {
  check_weight(w, "w");
  const pbops::WType wt = weight_type(w, "w");
  const int64_t N = w.size(0), K = w.size(1);
  const at::Tensor xf = as_f32_2d(x, K, "x");
  const at::Tensor ids = active_ids(idx, N, check);
  at::Tensor bias_keep;
  const float* b = opt_bias(bias, bias_keep, N, "bias");
  const int64_t B = xf.size(0), n = ids.numel();
  const int64_t cols = scatter ? N : n;
  at::Tensor out = scatter ? at::zeros({B, cols}, xf.options()) : at::empty({B, cols},
                                                                            xf.options());
  pbops::row(wt, w.data_ptr(), K, xf.data_ptr<float>(), B, ids.data_ptr<int64_t>(), n, b, relu,
             out.data_ptr<float>(), cols, scatter, threads());
  return out;
}

at::Tensor axpy(const at::Tensor& w_t, const at::Tensor& coeff, const at::Tensor& idx,
                const std::optional<at::Tensor>& init, bool check) {
  check_weight(w_t, "w_t");
  const pbops::WType wt = weight_type(w_t, "w_t");
  const int64_t N = w_t.size(0), D = w_t.size(1);
  const at::Tensor ids = active_ids(idx, N, check);
  const at::Tensor cf = as_f32_2d(coeff, ids.numel(), "coeffs");
  const int64_t B = cf.size(0);
  at::Tensor out;
  if (init.has_value()) {
    TORCH_CHECK_VALUE(init->dim() == 1 && init->size(0) == D, "bias must have shape [", D, "]");
    // clone: for B == 1 an fp32 bias would otherwise be aliased and written in place
    out = init->to(at::kFloat).reshape({1, D}).expand({B, D}).clone(
        at::MemoryFormat::Contiguous);
  } else {
    out = at::zeros({B, D}, cf.options());
  }
  pbops::axpy(wt, w_t.data_ptr(), D, cf.data_ptr<float>(), cf.size(1), B,
              ids.data_ptr<int64_t>(), ids.numel(), out.data_ptr<float>(), threads());
  return out;
}

at::Tensor ffn_relu(const at::Tensor& x, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
                    const at::Tensor& w2_t, const std::optional<at::Tensor>& b2,
                    const at::Tensor& idx, bool check) {
  check_weight(w1, "w1");
  check_weight(w2_t, "w2_t");
  TORCH_CHECK_VALUE(w1.sizes() == w2_t.sizes(), "w1 and w2_t must both be [d_ffn, d_model], got ",
                    w1.sizes(), " and ", w2_t.sizes());
  TORCH_CHECK_TYPE(w1.scalar_type() == w2_t.scalar_type(), "w1 and w2_t dtypes differ");
  const at::Tensor h = row(w1, x, idx, b1, /*relu=*/true, /*scatter=*/false, check);
  return axpy(w2_t, h, idx, b2, /*check=*/false);
}

at::Tensor ffn_gated(const at::Tensor& x, const at::Tensor& wg, const at::Tensor& wu,
                     const at::Tensor& wd_t, const at::Tensor& idx, int64_t kind, bool check) {
  const auto check_like_gate = [&wg](const at::Tensor& t, const char* name) {
    check_weight(t, name);
    TORCH_CHECK_VALUE(t.sizes() == wg.sizes(), name, " must be [d_ffn, d_model] like w_gate");
    TORCH_CHECK_TYPE(t.scalar_type() == wg.scalar_type(), name, " dtype differs from w_gate");
  };
  check_like_gate(wg, "w_gate");
  check_like_gate(wu, "w_up");
  check_like_gate(wd_t, "w_down_t");
  TORCH_CHECK_VALUE(kind >= 0 && kind <= 2, "unknown gated kind ", kind);
  const pbops::WType wt = weight_type(wg, "w_gate");
  const int64_t N = wg.size(0), K = wg.size(1);
  const at::Tensor xf = as_f32_2d(x, K, "x");
  const at::Tensor ids = active_ids(idx, N, check);
  const int64_t B = xf.size(0), n = ids.numel();
  at::Tensor h = at::empty({B, n}, xf.options());
  pbops::gated_hidden(wt, wg.data_ptr(), wu.data_ptr(), K, xf.data_ptr<float>(), B,
                      ids.data_ptr<int64_t>(), n, static_cast<pbops::GatedKind>(kind),
                      h.data_ptr<float>(), threads());
  return axpy(wd_t, h, ids, std::nullopt, /*check=*/false);
}

double read_bandwidth_sum(const at::Tensor& buf) {
  TORCH_CHECK_VALUE(buf.device().is_cpu() && buf.scalar_type() == at::kFloat &&
                        buf.is_contiguous(),
                    "buf must be a contiguous float32 CPU tensor");
  return pbops::read_sum(buf.data_ptr<float>(), buf.numel(), threads());
}

int64_t threads_used() { return pbops::threads_used(threads()); }

}  // namespace

TORCH_LIBRARY(powerbench_cpu, m) {
  m.def("row(Tensor w, Tensor x, Tensor idx, Tensor? bias, bool relu, bool scatter, bool check)"
        " -> Tensor",
        &row);
  m.def("axpy(Tensor w_t, Tensor coeffs, Tensor idx, Tensor? bias, bool check) -> Tensor", &axpy);
  m.def("ffn_relu(Tensor x, Tensor w1, Tensor? b1, Tensor w2_t, Tensor? b2, Tensor idx,"
        " bool check) -> Tensor",
        &ffn_relu);
  m.def("ffn_gated(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down_t, Tensor idx, int kind,"
        " bool check) -> Tensor",
        &ffn_gated);
  m.def("read_bandwidth_sum(Tensor buf) -> float", &read_bandwidth_sum);
  m.def("threads_used() -> int", &threads_used);
}
