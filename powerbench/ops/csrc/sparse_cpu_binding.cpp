// torch binding of the CPU kernels: argument checks, dtype dispatch, registered as
// torch.ops.powerbench_cpu.*, and the operators the Python backends call per token also as
// plain functions of the extension module (pybind11, see the end of the file).
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_isa.h"
#include "cpu_knobs.h"
#include "decode_cpu_kernels.h"
#include "sparse_cpu_kernels.h"
#include "thread_pool.h"

namespace {

// Error-message text of numbers, shapes and dtypes, built without ostream number formatting
// (std::to_string): TORCH_CHECK's c10::str streams its arguments into an ostringstream, and
// streaming numbers there segfaulted inside the CUDA extension on the device image's
// toolchain, so neither binding lets it format one. Same text as c10's operator<<.
std::string shape_str(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}
const char* dtype_str(at::ScalarType t) { return c10::toString(t); }

pbops::WType weight_type(const at::Tensor& w, const char* name) {
  switch (w.scalar_type()) {
    case at::kFloat: return pbops::kF32;
    case at::kHalf: return pbops::kF16;
    case at::kBFloat16: return pbops::kBF16;
    default:
      TORCH_CHECK_TYPE(false, name, " must be float32, float16 or bfloat16, got ",
                       dtype_str(w.scalar_type()));
  }
  return pbops::kF32;
}

void check_weight(const at::Tensor& w, const char* name) {
  TORCH_CHECK_VALUE(w.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK_VALUE(w.dim() == 2, name, " must be 2-D [neurons, features], got ",
                    std::to_string(w.dim()),
                    "-D");
  TORCH_CHECK_VALUE(w.is_contiguous(), name, " must be contiguous (prepare weights once)");
}

// A new CPU tensor of `dtype`, without the dispatcher's round trip: at::empty's CPU kernel
// calls the same at::detail::empty_cpu, so the tensor is the same (inference mode
// included: the TensorImpl reads it). Every operator here allocates its result this way.
// On a cold call (after a 64 MB cache read, as in a decode step) it saves 7-10 us: 2-core
// EPYC host, 2026-11-27 18:36-18:40 UTC, fp16 4096x16384 on 2 threads, eight alternating
// pairs of processes (builds with at::empty, with this), the op's time over the gather
// probe's on the same rows: 1 row 31 -> 22 us, 16 rows 29 -> 22 us (axpy 32 -> 22) on
// average, lower in 7-8 of the 8 pairs; at 1638 rows (90% sparsity) 4-10 us less, within
// that size's noise. The first allocation after the cache read still costs ~11 us (its
// code and the allocator's state are cold; a second one right after, under 1 us).
at::Tensor new_cpu(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::detail::empty_cpu(sizes, dtype);
}

// Validated int64 copy of the active list; `check` verifies range and uniqueness in O(n).
at::Tensor active_ids(const at::Tensor& idx, int64_t limit, bool check) {
  TORCH_CHECK_TYPE(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt,
                   "idx must be int32 or int64, got ", dtype_str(idx.scalar_type()));
  TORCH_CHECK_VALUE(idx.dim() == 1, "idx must be 1-D, got ", std::to_string(idx.dim()), "-D");
  at::Tensor ids = idx.to(at::kLong).contiguous();
  if (check) {
    const int64_t* p = ids.data_ptr<int64_t>();
    const int64_t n = ids.numel();
    std::vector<uint8_t> seen(static_cast<size_t>(limit), 0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = p[j];
      TORCH_CHECK_INDEX(v >= 0 && v < limit, "idx[", std::to_string(j), "] = ", std::to_string(v),
                        " is out of range for ", std::to_string(limit), " neurons");
      TORCH_CHECK_VALUE(!seen[v], "idx holds neuron ", std::to_string(v),
                        " twice (again at position ", std::to_string(j),
                        "); the active set must not repeat neurons");
      seen[v] = 1;
    }
  }
  return ids;
}

// fp32 contiguous data of t (converted into `keep` only when it is not already).
const float* f32_data(const at::Tensor& t, at::Tensor& keep) {
  if (t.scalar_type() == at::kFloat && t.is_contiguous()) return t.data_ptr<float>();
  keep = t.to(at::kFloat).contiguous();
  return keep.data_ptr<float>();
}

const float* bias_data(const std::optional<at::Tensor>& bias, at::Tensor& keep, int64_t len,
                       const char* name) {
  if (!bias.has_value()) return nullptr;
  TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == len, name, " must have shape (",
                    std::to_string(len), ",), got ", shape_str(bias->sizes()));
  return f32_data(*bias, keep);
}

// Per-thread fp32 scratch of the calling thread (slot 0: x, 1: a bias, 2: a result).
float* linear_scratch(int slot, int64_t n) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// fp32 data of t: in place when fp32 contiguous, else converted into scratch `slot` (fp16,
// bf16: no ATen call) or, for other float dtypes, through `keep`.
const float* as_f32(const at::Tensor& t, const char* name, int slot, at::Tensor& keep) {
  const at::ScalarType s = t.scalar_type();
  if (s != at::kHalf && s != at::kBFloat16) return f32_data(t, keep);
  const at::Tensor c = t.is_contiguous() ? t : (keep = t.contiguous());
  float* dst = linear_scratch(slot, c.numel());
  pbops::to_float(weight_type(c, name), c.data_ptr(), c.numel(), dst);
  return dst;
}

// ---- the operators' inputs and results without ATen calls on the decode path -------------
// A cold call (a decode step streams far more weights than the cache holds, so the
// interpreter's and the dispatcher's state is evicted between calls) costs ~15-40 us per
// ATen operation on the 2-core EPYC host (torch.empty alone ~17 us after a 64 MB flush):
// as much as reading 1 MB of weights. So x is converted in scratch, and the result is
// allocated once, in the caller's dtype, and written by the kernels or converted into.

// A batch of tokens (x, or axpy's coefficients): [B, cols], or [cols] for one token, of
// any float dtype, as fp32 data (scratch `slot` unless it is fp32 contiguous).
struct Tokens {
  const float* data;
  int64_t rows;
  bool one_d;
};

Tokens tokens(const at::Tensor& t, int64_t cols, const char* name, int slot, at::Tensor& keep) {
  TORCH_CHECK_TYPE(t.is_floating_point(), name, " must be a floating-point tensor");
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, " must be a CPU tensor");
  const bool one_d = t.dim() == 1;
  const bool ok = one_d ? t.size(0) == cols : t.dim() == 2 && t.size(1) == cols && t.size(0) >= 1;
  TORCH_CHECK_VALUE(ok, name, " must be [batch >= 1, ", std::to_string(cols), "] or [",
                    std::to_string(cols), "], got ", shape_str(t.sizes()));
  return {as_f32(t, name, slot, keep), one_d ? 1 : t.size(0), one_d};
}

// The caller's tensor for a result (`out=`): a contiguous CPU tensor of the result's dtype
// and shape, written in place and returned, so the call allocates nothing. Same messages
// as the Python check (ops.checks.check_out). Returns whether the kernels may write it
// directly: not when it shares memory with the tokens `x` they read (out=x), as the
// result's first write would overwrite them; then the result is computed aside and
// copied in, as the other backends do.
bool check_out(const at::Tensor& out, at::ScalarType dtype, at::IntArrayRef shape,
               const at::Tensor& x) {
  TORCH_CHECK_TYPE(out.scalar_type() == dtype, "out is ", dtype_str(out.scalar_type()),
                   ", the result is ", dtype_str(dtype));
  TORCH_CHECK_VALUE(out.sizes() == shape, "out has shape ", shape_str(out.sizes()),
                    ", the result is ", shape_str(shape));
  TORCH_CHECK_VALUE(out.device().is_cpu() && out.is_contiguous(),
                    "out must be a contiguous CPU tensor");
  return at::get_overlap_status(out, x) == at::MemOverlapStatus::No;
}

// An operator's result: `y` ([B, cols], or [cols] for a one-token input, in the input's
// dtype when `in_dtype`, else fp32 [B, cols]; the caller's `out` when given) and the fp32
// buffer the kernels write (y itself when fp32, else scratch that finish() converts into
// y: one rounding, as before).
struct Result {
  at::Tensor y;
  float* f32;
  at::ScalarType dtype;
  std::optional<at::Tensor> out;  // the caller's tensor, when y could not be it (below)
};

Result result(const at::Tensor& like, bool in_dtype, bool one_d, int64_t B, int64_t cols,
              const std::optional<at::Tensor>& out) {
  const at::ScalarType s = in_dtype ? like.scalar_type() : at::kFloat;
  const bool half = s == at::kHalf || s == at::kBFloat16;
  const at::ScalarType ys = half ? s : at::kFloat;
  const int64_t dims[2] = {B, cols};  // [cols] for a one-token input in its own dtype
  const at::IntArrayRef shape = in_dtype && one_d ? at::IntArrayRef(dims + 1, 1)
                                                  : at::IntArrayRef(dims, 2);
  // out is written directly unless it is float64 or holds the tokens (check_out)
  const bool direct = out.has_value() && check_out(*out, s, shape, like) && s == ys;
  at::Tensor y = direct ? *out : new_cpu(shape, ys);
  return {y, half ? linear_scratch(2, B * cols) : y.data_ptr<float>(), s,
          direct ? std::nullopt : out};
}

// r.f32[b, :] = bias (or 0) for b < B
void fill_rows(const Result& r, int64_t B, int64_t cols, const float* bias) {
  for (int64_t b = 0; b < B; ++b) {
    if (bias) std::memcpy(r.f32 + b * cols, bias, sizeof(float) * cols);
    else std::memset(r.f32 + b * cols, 0, sizeof(float) * cols);
  }
}

at::Tensor finish(const Result& r) {
  at::Tensor y = r.y;
  if (y.scalar_type() != at::kFloat)
    pbops::from_float(weight_type(y, "y"), r.f32, y.numel(), y.data_ptr());
  else if (r.dtype != at::kFloat)
    y = y.to(r.dtype);  // e.g. float64 x: fp32 -> x's dtype
  return r.out.has_value() ? r.out->copy_(y) : y;
}

int threads() { return at::get_num_threads(); }

// The active list as int64 data (validated when `check`).
const int64_t* id_data(const at::Tensor& idx, int64_t limit, bool check, at::Tensor& keep) {
  if (!check && idx.scalar_type() == at::kLong && idx.dim() == 1 && idx.is_contiguous())
    return idx.data_ptr<int64_t>();
  keep = active_ids(idx, limit, check);
  return keep.data_ptr<int64_t>();
}

// y = act(W[idx] x + bias[idx]) in x's dtype and shape ([B, n], or [B, N] scattered).
at::Tensor row(const at::Tensor& w, const at::Tensor& x, const at::Tensor& idx,
               const std::optional<at::Tensor>& bias, bool relu, bool scatter, bool check,
               const std::optional<at::Tensor>& out) {
  pbops::wake_helpers(threads());  // knob prewake: helpers spin while we set up
  check_weight(w, "w");
  const pbops::WType wt = weight_type(w, "w");
  const int64_t N = w.size(0), K = w.size(1);
  at::Tensor xk, idk, bk;
  const Tokens xt = tokens(x, K, "x", 0, xk);
  const int64_t* ids = id_data(idx, N, check, idk);
  const float* b = bias_data(bias, bk, N, "bias");
  const int64_t n = idx.numel(), cols = scatter ? N : n;
  const Result r = result(x, true, xt.one_d, xt.rows, cols, out);
  if (scatter) fill_rows(r, xt.rows, cols, nullptr);
  pbops::row(wt, w.data_ptr(), K, xt.data, xt.rows, ids, n, b, relu, r.f32, cols, scatter,
             threads());
  return finish(r);
}

// y = init + sum_j coeffs[:, j] W_t[idx[j]] in coeffs' dtype and shape ([B, D] or [D]).
at::Tensor axpy(const at::Tensor& w_t, const at::Tensor& coeff, const at::Tensor& idx,
                const std::optional<at::Tensor>& init, bool check,
                const std::optional<at::Tensor>& out) {
  pbops::wake_helpers(threads());  // knob prewake: helpers spin while we set up
  check_weight(w_t, "w_t");
  const pbops::WType wt = weight_type(w_t, "w_t");
  const int64_t N = w_t.size(0), D = w_t.size(1);
  at::Tensor idk, ck, ik;
  const int64_t* ids = id_data(idx, N, check, idk);
  const int64_t n = idx.numel();
  const Tokens c = tokens(coeff, n, "coeffs", 0, ck);
  const float* b = nullptr;
  if (init.has_value()) {
    TORCH_CHECK_VALUE(init->dim() == 1 && init->size(0) == D, "bias must have shape (",
                      std::to_string(D), ",), got ", shape_str(init->sizes()));
    b = as_f32(*init, "bias", 1, ik);
  }
  const Result r = result(coeff, true, c.one_d, c.rows, D, out);
  fill_rows(r, c.rows, D, b);
  pbops::axpy(wt, w_t.data_ptr(), D, c.data, n, c.rows, ids, n, r.f32, threads());
  return finish(r);
}

// ---- the fused FFNs: one output allocation, scratch in thread-local buffers --------------
// A decode step calls these once per layer with tiny shapes, so every ATen call (a
// dispatcher round trip, ~1 us here) counts: inputs that are already fp32/int64 and
// contiguous are read in place, and intermediates never become tensors.

// x as fp32 [B, K] data; B returned through `rows`.
const float* x_data(const at::Tensor& x, int64_t K, at::Tensor& keep, int64_t& rows) {
  TORCH_CHECK_VALUE(x.dim() == 2, "x must be 2-D [batch, features]");
  TORCH_CHECK_VALUE(x.size(1) == K, "x has ", std::to_string(x.size(1)), " features, expected ",
                    std::to_string(K));
  TORCH_CHECK_VALUE(x.size(0) >= 1, "x must hold at least one token");
  rows = x.size(0);
  return as_f32(x, "x", 0, keep);
}

float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// y [B, D] = bias (or 0), ready for axpy to add into.
at::Tensor output(int64_t B, int64_t D, const float* bias) {
  at::Tensor y = new_cpu({B, D}, at::kFloat);
  float* p = y.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    if (bias) std::memcpy(p + b * D, bias, sizeof(float) * D);
    else std::memset(p + b * D, 0, sizeof(float) * D);
  }
  return y;
}

void check_pair(const at::Tensor& a, const char* an, const at::Tensor& b, const char* bn) {
  check_weight(a, an);
  TORCH_CHECK_VALUE(a.sizes() == b.sizes(), bn, " has shape ", shape_str(b.sizes()),
                    ", expected ", shape_str(a.sizes()), " like ", an, " (both [d_ffn, d_model])");
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), bn, " is ", dtype_str(b.scalar_type()),
                   " but ", an, " is ", dtype_str(a.scalar_type()));
  check_weight(b, bn);
}

// y += relu(W1[ids] x + b1[ids]) . W2t[ids]
void relu_ffn_into(const at::Tensor& w1, const float* b1, const at::Tensor& w2_t,
                   const float* x, int64_t B, const int64_t* ids, int64_t n, float* y) {
  const pbops::WType wt = weight_type(w1, "w1");
  const int64_t K = w1.size(1);
  float* h = scratch(0, B * n);
  pbops::row(wt, w1.data_ptr(), K, x, B, ids, n, b1, /*relu=*/true, h, n, false, threads());
  pbops::axpy(wt, w2_t.data_ptr(), K, h, n, B, ids, n, y, threads());
}

void gated_ffn_into(const at::Tensor& wg, const at::Tensor& wu, const at::Tensor& wd_t,
                    int64_t kind, const float* x, int64_t B, const int64_t* ids, int64_t n,
                    float* y) {
  TORCH_CHECK_VALUE(kind >= 0 && kind <= 2, "unknown gated kind ", std::to_string(kind));
  const pbops::WType wt = weight_type(wg, "w_gate");
  const int64_t K = wg.size(1);
  float* h = scratch(0, B * n);
  pbops::gated_hidden(wt, wg.data_ptr(), wu.data_ptr(), K, x, B, ids, n,
                      static_cast<pbops::GatedKind>(kind), h, threads());
  pbops::axpy(wt, wd_t.data_ptr(), K, h, n, B, ids, n, y, threads());
}

// in_dtype: y in x's dtype and shape (the public API), else fp32 [B, d_model] (prepare_ffn)
at::Tensor ffn_relu(const at::Tensor& x, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
                    const at::Tensor& w2_t, const std::optional<at::Tensor>& b2,
                    const at::Tensor& idx, bool check, bool in_dtype,
                    const std::optional<at::Tensor>& out) {
  pbops::wake_helpers(threads());  // knob prewake: helpers spin while we set up
  check_pair(w1, "w1", w2_t, "w2_t");
  const int64_t N = w1.size(0), K = w1.size(1);
  at::Tensor xk, b1k, b2k, idk;
  const Tokens xt = tokens(x, K, "x", 0, xk);
  const float* b1p = bias_data(b1, b1k, N, "b1");
  const float* b2p = bias_data(b2, b2k, K, "b2");
  const int64_t* ids = id_data(idx, N, check, idk);
  const Result r = result(x, in_dtype, xt.one_d, xt.rows, K, out);
  fill_rows(r, xt.rows, K, b2p);
  relu_ffn_into(w1, b1p, w2_t, xt.data, xt.rows, ids, idx.numel(), r.f32);
  return finish(r);
}

at::Tensor ffn_gated(const at::Tensor& x, const at::Tensor& wg, const at::Tensor& wu,
                     const at::Tensor& wd_t, const at::Tensor& idx, int64_t kind, bool check,
                     bool in_dtype, const std::optional<at::Tensor>& out) {
  pbops::wake_helpers(threads());  // knob prewake: helpers spin while we set up
  check_pair(wg, "w_gate", wu, "w_up");
  check_pair(wg, "w_gate", wd_t, "w_down_t");
  const int64_t N = wg.size(0), K = wg.size(1);
  at::Tensor xk, idk;
  const Tokens xt = tokens(x, K, "x", 0, xk);
  const int64_t* ids = id_data(idx, N, check, idk);
  const Result r = result(x, in_dtype, xt.one_d, xt.rows, K, out);
  fill_rows(r, xt.rows, K, nullptr);
  gated_ffn_into(wg, wu, wd_t, kind, xt.data, xt.rows, ids, idx.numel(), r.f32);
  return finish(r);
}

// 0, 1, ..., n-1 (grown on demand): the "every row" index list of a dense row pass.
const int64_t* every_row(int64_t n) {
  thread_local std::vector<int64_t> ids;
  for (int64_t i = static_cast<int64_t>(ids.size()); i < n; ++i) ids.push_back(i);
  return ids.data();
}

// The neurons a layer's predictor selects for ANY token of x [B, K]: logits = b2 +
// act(p_w1 . x + b1) . p_w2_t (p_w1 [r, K]; p_w2_t [r, N], the output layer stored
// transposed so that it is r contiguous axpy rows; act: ReLU or identity), ids j with
// logit[b, j] >= threshold for some b, ascending, as an int64 tensor.
at::Tensor predicted_ids(const float* x, int64_t B, int64_t K,
                         const at::Tensor& p_w1, const std::optional<at::Tensor>& p_b1,
                         const at::Tensor& p_w2_t, const std::optional<at::Tensor>& p_b2,
                         double threshold, bool hidden_relu, int64_t neurons) {
  check_weight(p_w1, "predictor w1");
  check_weight(p_w2_t, "predictor w2_t");
  const int64_t R = p_w1.size(0), N = p_w2_t.size(1);
  TORCH_CHECK_VALUE(p_w1.size(1) == K, "predictor w1 has ", std::to_string(p_w1.size(1)),
                    " inputs, x has ", std::to_string(K));
  TORCH_CHECK_VALUE(p_w2_t.size(0) == R, "predictor w2_t has ",
                    std::to_string(p_w2_t.size(0)), " rows, predictor w1 has ", std::to_string(R),
                    " outputs");
  TORCH_CHECK_VALUE(N == neurons, "the predictor scores ", std::to_string(N),
                    " neurons, the FFN has ", std::to_string(neurons));
  at::Tensor b1k, b2k;
  const float* b1 = bias_data(p_b1, b1k, R, "predictor b1");
  const float* b2 = bias_data(p_b2, b2k, N, "predictor b2");
  const int64_t* all = every_row(R);
  float* h = scratch(1, B * R);
  pbops::row(weight_type(p_w1, "predictor w1"), p_w1.data_ptr(), K, x, B, all, R, b1,
             hidden_relu, h, R, false, threads());
  float* logits = scratch(2, B * N);
  for (int64_t b = 0; b < B; ++b) {
    if (b2) std::memcpy(logits + b * N, b2, sizeof(float) * N);
    else std::memset(logits + b * N, 0, sizeof(float) * N);
  }
  pbops::axpy(weight_type(p_w2_t, "predictor w2_t"), p_w2_t.data_ptr(), N, h, R, B, all, R,
              logits, threads());
  const float t = static_cast<float>(threshold);
  int64_t* chosen = reinterpret_cast<int64_t*>(scratch(0, 2 * N));  // reused for h later
  int64_t n = 0;
  for (int64_t j = 0; j < N; ++j) {
    for (int64_t b = 0; b < B; ++b) {
      if (logits[b * N + j] >= t) {
        chosen[n++] = j;
        break;
      }
    }
  }
  at::Tensor ids = new_cpu({n}, at::kLong);
  if (n) std::memcpy(ids.data_ptr<int64_t>(), chosen, sizeof(int64_t) * n);
  return ids;
}

// Predictor and sparse FFN in one call (one dispatch per layer): returns (y, active ids).
std::tuple<at::Tensor, at::Tensor> ffn_relu_predicted(
    const at::Tensor& x, const at::Tensor& p_w1, const std::optional<at::Tensor>& p_b1,
    const at::Tensor& p_w2_t, const std::optional<at::Tensor>& p_b2, double threshold,
    bool hidden_relu, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
    const at::Tensor& w2_t, const std::optional<at::Tensor>& b2) {
  check_pair(w1, "w1", w2_t, "w2_t");
  const int64_t N = w1.size(0), K = w1.size(1);
  at::Tensor xk, b1k, b2k;
  int64_t B = 0;
  const float* xf = x_data(x, K, xk, B);
  const float* b1p = bias_data(b1, b1k, N, "b1");
  const float* b2p = bias_data(b2, b2k, K, "b2");
  at::Tensor ids = predicted_ids(xf, B, K, p_w1, p_b1, p_w2_t, p_b2, threshold, hidden_relu, N);
  at::Tensor y = output(B, K, b2p);
  relu_ffn_into(w1, b1p, w2_t, xf, B, ids.data_ptr<int64_t>(), ids.numel(), y.data_ptr<float>());
  return {y, ids};
}

std::tuple<at::Tensor, at::Tensor> ffn_gated_predicted(
    const at::Tensor& x, const at::Tensor& p_w1, const std::optional<at::Tensor>& p_b1,
    const at::Tensor& p_w2_t, const std::optional<at::Tensor>& p_b2, double threshold,
    bool hidden_relu, const at::Tensor& wg, const at::Tensor& wu, const at::Tensor& wd_t,
    int64_t kind) {
  check_pair(wg, "w_gate", wu, "w_up");
  check_pair(wg, "w_gate", wd_t, "w_down_t");
  const int64_t N = wg.size(0), K = wg.size(1);
  at::Tensor xk;
  int64_t B = 0;
  const float* xf = x_data(x, K, xk, B);
  at::Tensor ids = predicted_ids(xf, B, K, p_w1, p_b1, p_w2_t, p_b2, threshold, hidden_relu, N);
  at::Tensor y = output(B, K, nullptr);
  gated_ffn_into(wg, wu, wd_t, kind, xf, B, ids.data_ptr<int64_t>(), ids.numel(),
                 y.data_ptr<float>());
  return {y, ids};
}

// CATS-style threshold sparsity for a gated FFN (one dispatch per layer): the gate for
// EVERY neuron (a dense row pass), a = act(g) (ReLU for ReGLU/dReLU, SiLU for SwiGLU),
// neuron j kept for token b iff |a[b, j]| > threshold; then only the kept neurons' up rows
// and down columns: y[b] = sum_j [kept(b, j)] a[b, j] f(u[b, j]) Wd_t[j]. A neuron kept
// for one token is exactly zero for the tokens where it is not. Returns (y, union ids).
std::tuple<at::Tensor, at::Tensor> ffn_gated_threshold(
    const at::Tensor& x, const at::Tensor& wg, const at::Tensor& wu, const at::Tensor& wd_t,
    double threshold, int64_t kind) {
  check_pair(wg, "w_gate", wu, "w_up");
  check_pair(wg, "w_gate", wd_t, "w_down_t");
  TORCH_CHECK_VALUE(kind >= 0 && kind <= 2, "unknown gated kind ", std::to_string(kind));
  const pbops::WType wt = weight_type(wg, "w_gate");
  const int64_t N = wg.size(0), K = wg.size(1);
  at::Tensor xk;
  int64_t B = 0;
  const float* xf = x_data(x, K, xk, B);
  // a = act(gate) for every neuron and token: the gate rows are one contiguous matrix, so
  // the dense kernel streams them (its prefetch suits consecutive rows)
  float* a = scratch(1, B * N);
  pbops::dense(wt, wg.data_ptr(), N, K, xf, B, nullptr, pbops::kF32, a, N, threads());
  pbops::activate(a, B * N, static_cast<pbops::GatedKind>(kind));
  const float t = static_cast<float>(threshold);
  int64_t* chosen = reinterpret_cast<int64_t*>(scratch(2, 2 * N));
  int64_t n = 0;
  for (int64_t j = 0; j < N; ++j) {
    for (int64_t b = 0; b < B; ++b) {
      if (std::fabs(a[b * N + j]) > t) {
        chosen[n++] = j;
        break;
      }
    }
  }
  at::Tensor ids = new_cpu({n}, at::kLong);
  at::Tensor y = output(B, K, nullptr);
  if (n == 0) return {y, ids};
  int64_t* id = ids.data_ptr<int64_t>();
  std::memcpy(id, chosen, sizeof(int64_t) * n);
  // h[b, j] = up row of each kept neuron, then the gated coefficient (0 where not kept)
  float* h = scratch(0, B * n);
  pbops::row(wt, wu.data_ptr(), K, xf, B, id, n, nullptr, kind == pbops::kDReLU, h, n, false,
             threads());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < n; ++j) {
      const float av = a[b * N + id[j]];
      h[b * n + j] = std::fabs(av) > t ? av * h[b * n + j] : 0.0f;
    }
  }
  pbops::axpy(wt, wd_t.data_ptr(), K, h, n, B, id, n, y.data_ptr<float>(), threads());
  return {y, ids};
}

// ---- dense linear: y = x W^T + b for decode-shaped x (a few rows) -------------------------
// x [..., K] fp32/fp16/bf16 on the CPU, w [N, K] fp32/fp16/bf16, bias [N] any float dtype;
// y [..., N] in x's dtype, accumulated in fp32. The only allocation is y: x and bias are
// read in place when fp32 contiguous, else converted into per-thread scratch.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                  const std::optional<at::Tensor>& out) {
  pbops::wake_helpers(threads());  // knob prewake: helpers spin while we set up
  check_weight(w, "w");
  const pbops::WType wt = weight_type(w, "w");
  const pbops::WType ot = weight_type(x, "x");
  const int64_t N = w.size(0), K = w.size(1);
  TORCH_CHECK_VALUE(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == K, "x must be [..., ",
                    std::to_string(K), "], got ", shape_str(x.sizes()));
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  const bool direct = out.has_value() && check_out(*out, x.scalar_type(), shape, x);
  at::Tensor y = direct ? *out : new_cpu(shape, x.scalar_type());
  const int64_t B = K > 0 ? x.numel() / K : 0;
  if (B == 0 || N == 0) return out.has_value() ? *out : y;
  at::Tensor xk, bk;
  const float* xf = as_f32(x, "x", 0, xk);
  const float* b = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == N, "bias must have shape [",
                      std::to_string(N), "]");
    TORCH_CHECK_VALUE(bias->device().is_cpu(), "bias must be a CPU tensor");
    b = as_f32(*bias, "bias", 1, bk);
  }
  pbops::dense(wt, w.data_ptr(), N, K, xf, B, b, ot, y.data_ptr(), N, threads());
  return out.has_value() && !direct ? out->copy_(y) : y;
}

// ---- fused decode-step operators (one new token per row) ----------------------------------
void check_same(const at::Tensor& t, const at::Tensor& ref, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu() && t.is_contiguous(), name,
                    " must be a contiguous CPU tensor");
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), name, " must be ",
                   dtype_str(ref.scalar_type()), " like x, got ", dtype_str(t.scalar_type()));
}

// y = weight * T(x / sqrt(mean(x^2) + eps)) over the last dimension (HF LlamaRMSNorm).
at::Tensor rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps) {
  check_same(x, x, "x");
  const pbops::WType t = weight_type(x, "x");
  const int64_t D = x.size(-1);
  if (weight.has_value()) {
    check_same(*weight, x, "weight");
    TORCH_CHECK_VALUE(weight->numel() == D, "weight must have ", std::to_string(D),
                      " elements");
  }
  at::Tensor y = new_cpu(x.sizes(), x.scalar_type());
  if (x.numel() == 0) return y;
  pbops::rms_norm(t, x.data_ptr(), weight.has_value() ? weight->data_ptr() : nullptr,
                  x.numel() / D, D, static_cast<float>(eps), y.data_ptr());
  return y;
}

// h = act(gate) * f(up) from y = [gate | up] [..., 2 N] (the stacked gate/up product), in
// y's dtype; kind as in ffn_gated (0 ReGLU, 1 dReLU, 2 SwiGLU).
at::Tensor gated_activation(const at::Tensor& y, int64_t kind) {
  check_same(y, y, "y");
  TORCH_CHECK_VALUE(kind >= 0 && kind <= 2, "unknown gated kind ", std::to_string(kind));
  TORCH_CHECK_VALUE(y.dim() >= 1 && y.size(-1) % 2 == 0,
                    "y must be [..., 2 d_ffn] (gate, then up), got ", shape_str(y.sizes()));
  std::vector<int64_t> shape(y.sizes().begin(), y.sizes().end());
  const int64_t N = shape.back() / 2;
  shape.back() = N;
  at::Tensor h = new_cpu(shape, y.scalar_type());
  if (h.numel() == 0) return h;
  pbops::gated_activation(weight_type(y, "y"), y.data_ptr(), h.numel() / N, N,
                          static_cast<pbops::GatedKind>(kind), h.data_ptr());
  return h;
}

// Attention of one new token per row after the stacked Q/K/V product (see
// decode_cpu_kernels.h): qkv [B, 1, (H + 2 KV) hd]; cos, sin [B, hd] or None; k_cache,
// v_cache [B, KV, max_len, hd], written at row `pos`; returns [B, 1, H hd].
at::Tensor decode_attention(const at::Tensor& qkv, const std::optional<at::Tensor>& cos,
                            const std::optional<at::Tensor>& sin, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, int64_t pos, int64_t n_heads,
                            double scale) {
  check_same(qkv, qkv, "qkv");
  check_same(k_cache, qkv, "k_cache");
  check_same(v_cache, qkv, "v_cache");
  TORCH_CHECK_VALUE(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(),
                    "k_cache and v_cache must both be [B, n_kv_heads, max_len, head_dim]");
  const int64_t B = k_cache.size(0), KV = k_cache.size(1), L = k_cache.size(2),
                hd = k_cache.size(3);
  TORCH_CHECK_VALUE(n_heads >= KV && KV > 0 && n_heads % KV == 0, "n_heads (",
                    std::to_string(n_heads), ") must be a multiple of the cache's ",
                    std::to_string(KV), " KV heads");
  TORCH_CHECK_VALUE(qkv.dim() == 3 && qkv.size(0) == B && qkv.size(1) == 1 &&
                        qkv.size(2) == (n_heads + 2 * KV) * hd,
                    "qkv must be [", std::to_string(B), ", 1, ",
                    std::to_string((n_heads + 2 * KV) * hd), "], got ", shape_str(qkv.sizes()));
  TORCH_CHECK_INDEX(pos >= 0 && pos < L, "position ", std::to_string(pos),
                    " is outside the cache (", std::to_string(L), ")");
  TORCH_CHECK_VALUE(cos.has_value() == sin.has_value(), "give both cos and sin, or neither");
  if (cos.has_value()) {
    check_same(*cos, qkv, "cos");
    check_same(*sin, qkv, "sin");
    TORCH_CHECK_VALUE(cos->numel() == B * hd && sin->numel() == B * hd,
                      "cos and sin must hold [", std::to_string(B), ", ",
                      std::to_string(hd), "]");
  }
  at::Tensor out = new_cpu({B, 1, n_heads * hd}, qkv.scalar_type());
  pbops::decode_attention(weight_type(qkv, "qkv"), qkv.data_ptr(),
                          cos.has_value() ? cos->data_ptr() : nullptr,
                          sin.has_value() ? sin->data_ptr() : nullptr, k_cache.data_ptr(),
                          v_cache.data_ptr(), B, n_heads, KV, hd, L, pos,
                          static_cast<float>(scale), out.data_ptr(), threads());
  return out;
}

double read_bandwidth_sum(const at::Tensor& buf) {
  TORCH_CHECK_VALUE(buf.device().is_cpu() && buf.scalar_type() == at::kFloat &&
                        buf.is_contiguous(),
                    "buf must be a contiguous float32 CPU tensor");
  return pbops::read_sum(buf.data_ptr<float>(), buf.numel(), threads());
}

// The read-only gather probe over the same rows of every matrix in `mats` (each 2-D,
// contiguous, any dtype, the same number of rows): the sum modulo 2^32 of the bytes read as
// 32-bit words per row (gather_probe in sparse_cpu_kernels.h). mode 0: the operators'
// row-slot schedule, 1: merged runs of adjacent rows.
int64_t gather_probe(const std::vector<at::Tensor>& mats, const at::Tensor& idx, int64_t mode,
                     bool check) {
  TORCH_CHECK_VALUE(mode >= 0 && mode <= 2,
                    "gather probe mode must be 0 (slots), 1 (runs) or 2 (wide), got ",
                    std::to_string(mode));
  TORCH_CHECK_VALUE(!mats.empty(), "gather probe needs at least one matrix");
  const int64_t N = mats[0].dim() == 2 ? mats[0].size(0) : -1;
  for (const at::Tensor& m : mats)
    TORCH_CHECK_VALUE(m.device().is_cpu() && m.dim() == 2 && m.is_contiguous() &&
                          m.size(0) == N,
                      "gather probe matrices must be contiguous 2-D CPU tensors with the same "
                      "number of rows");
  at::Tensor keep;
  const int64_t* ids = id_data(idx, N, check, keep);
  uint32_t total = 0;
  for (const at::Tensor& m : mats)
    total += pbops::gather_probe(m.data_ptr(), m.size(1), int64_t(m.element_size()), ids,
                                 idx.numel(), int(mode), threads());
  return int64_t(total);
}

int64_t threads_used() { return pbops::threads_used(threads()); }

// ---- ISA paths (cpu_isa.h): which the CPU supports, which runs, choose one ----------------
std::vector<std::string> cpu_isas() {
  int count = 0;
  const char* const* names = pbops::supported_isas(&count);
  return std::vector<std::string>(names, names + count);
}

std::string cpu_isa() { return pbops::current_isa(); }

void set_cpu_isa(const std::string& name) {
  TORCH_CHECK_VALUE(pbops::set_isa(name.c_str()), "CPU kernel path '", name,
                    "' is unknown or not supported by this CPU");
}

// ---- tuning knobs (cpu_knobs.h), read by the kernels at every call -------------------------
std::vector<std::string> cpu_knob_names() {
  std::vector<std::string> names;
  for (const pbops::KnobSpec& s : pbops::kKnobSpecs) names.emplace_back(s.name);
  return names;
}

// (default, lo, hi) per knob, flattened
std::vector<int64_t> cpu_knob_ranges() {
  std::vector<int64_t> out;
  for (const pbops::KnobSpec& s : pbops::kKnobSpecs) out.insert(out.end(), {s.value, s.lo, s.hi});
  return out;
}

std::vector<int64_t> cpu_knobs() {
  std::vector<int64_t> out;
  for (int k = 0; k < pbops::kKnobCount; ++k) out.push_back(pbops::knob(pbops::Knob(k)));
  return out;
}

// every knob at once, in cpu_knob_names() order
void set_cpu_knobs(const std::vector<int64_t>& values) {
  TORCH_CHECK_VALUE(values.size() == size_t(pbops::kKnobCount), "set_cpu_knobs needs ",
                    std::to_string(int(pbops::kKnobCount)), " values, got ",
                    std::to_string(values.size()));
  for (int k = 0; k < pbops::kKnobCount; ++k) {
    const pbops::KnobSpec& s = pbops::kKnobSpecs[k];
    TORCH_CHECK_VALUE(values[k] >= s.lo && values[k] <= s.hi, "CPU knob ", s.name, "=",
                      std::to_string(values[k]), " is outside [", std::to_string(s.lo), ", ",
                      std::to_string(s.hi), "]");
  }
  for (int k = 0; k < pbops::kKnobCount; ++k) pbops::set_knob(pbops::kKnobSpecs[k].name, values[k]);
}

}  // namespace

TORCH_LIBRARY(powerbench_cpu, m) {
  m.def("row(Tensor w, Tensor x, Tensor idx, Tensor? bias, bool relu, bool scatter, bool check,"
        " Tensor(a!)? out=None) -> Tensor",
        &row);
  m.def("axpy(Tensor w_t, Tensor coeffs, Tensor idx, Tensor? bias, bool check,"
        " Tensor(a!)? out=None) -> Tensor",
        &axpy);
  m.def("ffn_relu(Tensor x, Tensor w1, Tensor? b1, Tensor w2_t, Tensor? b2, Tensor idx,"
        " bool check, bool in_dtype=False, Tensor(a!)? out=None) -> Tensor",
        &ffn_relu);
  m.def("ffn_gated(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down_t, Tensor idx, int kind,"
        " bool check, bool in_dtype=False, Tensor(a!)? out=None) -> Tensor",
        &ffn_gated);
  m.def("ffn_relu_predicted(Tensor x, Tensor p_w1, Tensor? p_b1, Tensor p_w2_t, Tensor? p_b2,"
        " float threshold, bool hidden_relu, Tensor w1, Tensor? b1, Tensor w2_t, Tensor? b2)"
        " -> (Tensor, Tensor)",
        &ffn_relu_predicted);
  m.def("ffn_gated_predicted(Tensor x, Tensor p_w1, Tensor? p_b1, Tensor p_w2_t, Tensor? p_b2,"
        " float threshold, bool hidden_relu, Tensor w_gate, Tensor w_up, Tensor w_down_t,"
        " int kind) -> (Tensor, Tensor)",
        &ffn_gated_predicted);
  m.def("ffn_gated_threshold(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down_t,"
        " float threshold, int kind) -> (Tensor, Tensor)",
        &ffn_gated_threshold);
  m.def("linear(Tensor x, Tensor w, Tensor? bias, Tensor(a!)? out=None) -> Tensor", &linear);
  m.def("rms_norm(Tensor x, Tensor? weight, float eps) -> Tensor", &rms_norm);
  m.def("gated_activation(Tensor y, int kind) -> Tensor", &gated_activation);
  m.def("decode_attention(Tensor qkv, Tensor? cos, Tensor? sin, Tensor(a!) k_cache,"
        " Tensor(b!) v_cache, int pos, int n_heads, float scale) -> Tensor",
        &decode_attention);
  m.def("read_bandwidth_sum(Tensor buf) -> float", &read_bandwidth_sum);
  m.def("gather_probe(Tensor[] mats, Tensor idx, int mode, bool check) -> int", &gather_probe);
  m.def("threads_used() -> int", &threads_used);
  m.def("cpu_isas() -> str[]", &cpu_isas);
  m.def("cpu_isa() -> str", &cpu_isa);
  m.def("set_cpu_isa(str name) -> ()", &set_cpu_isa);
  m.def("cpu_knob_names() -> str[]", &cpu_knob_names);
  m.def("cpu_knob_ranges() -> int[]", &cpu_knob_ranges);
  m.def("cpu_knobs() -> int[]", &cpu_knobs);
  m.def("set_cpu_knobs(int[] values) -> ()", &set_cpu_knobs);
}

// The operators a decode step or an operator benchmark calls, as functions of the Python
// module itself: the Python backends call these rather than torch.ops.powerbench_cpu.*, whose
// dispatcher path is long and, after the weights of a layer streamed through the cache, cold.
// Measured on the 2-core EPYC host (2026-11-27 06:00 UTC), a C++ function that only
// allocates a [1, 4096] output: 37.8 us per call through torch.ops and 20.9 us through
// pybind11 after a 64 MB cache read, 2.3 vs 1.1 us warm; a 4096x16384 fp16 row product at
// 90% sparsity takes 400-500 us. Same functions, same argument order (positional; `out` may
// be left out, or passed by name).
// Each releases the GIL while it runs (torch.ops does the same): engine=hybrid's CPU part runs
// on a worker thread while the decoder thread issues the GPU part from Python, and an
// operator holding the GIL stopped that thread for its whole run (an H100 host, 2026-11-27:
// the GPU part's launches waited behind the CPU part). Arguments are converted before the
// release and the result after it.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using pybind11::arg;
  const auto out = arg("out") = pybind11::none();  // the result's tensor, or None: allocated
  const auto nogil = pybind11::call_guard<pybind11::gil_scoped_release>();
  m.def("row", &row, arg("w"), arg("x"), arg("idx"), arg("bias"), arg("relu"), arg("scatter"),
        arg("check"), out, nogil);
  m.def("axpy", &axpy, arg("w_t"), arg("coeffs"), arg("idx"), arg("bias"), arg("check"), out,
        nogil);
  m.def("ffn_relu", &ffn_relu, arg("x"), arg("w1"), arg("b1"), arg("w2_t"), arg("b2"),
        arg("idx"), arg("check"), arg("in_dtype"), out, nogil);
  m.def("ffn_gated", &ffn_gated, arg("x"), arg("w_gate"), arg("w_up"), arg("w_down_t"),
        arg("idx"), arg("kind"), arg("check"), arg("in_dtype"), out, nogil);
  m.def("ffn_relu_predicted", &ffn_relu_predicted, nogil);
  m.def("ffn_gated_predicted", &ffn_gated_predicted, nogil);
  m.def("ffn_gated_threshold", &ffn_gated_threshold, nogil);
  m.def("linear", &linear, arg("x"), arg("w"), arg("bias"), out, nogil);
  m.def("rms_norm", &rms_norm, nogil);
  m.def("gated_activation", &gated_activation, nogil);
  m.def("decode_attention", &decode_attention, nogil);
  m.def("read_bandwidth_sum", &read_bandwidth_sum, nogil);
  m.def("gather_probe", &gather_probe, nogil);
}
