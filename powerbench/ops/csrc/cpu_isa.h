// The CPU kernels' ISA paths: every kernel of sparse_cpu_kernels.h and decode_cpu_kernels.h
// is compiled once per path (cpu_isa_avx512_bf16.cpp, cpu_isa_avx512.cpp, cpu_isa_avx2.cpp,
// cpu_isa_portable.cpp: the same source under different `#pragma GCC target`s, so one
// library holds all four),
// and the public functions call the path chosen at load (cpu_dispatch.cpp): the best the CPU
// supports, or the one named by $POWERBENCH_CPU_ISA (checked on the Python side, see
// powerbench/ops/isa.py).
#pragma once

#include "decode_cpu_kernels.h"
#include "sparse_cpu_kernels.h"

namespace pbops {

struct KernelTable {
  const char* name;  // "avx512_bf16", "avx512", "avx2", "portable"
  decltype(&::pbops::row) row_fn;
  decltype(&::pbops::axpy) axpy_fn;
  decltype(&::pbops::gated_hidden) gated_hidden_fn;
  decltype(&::pbops::dense) dense_fn;
  decltype(&::pbops::to_float) to_float_fn;
  decltype(&::pbops::from_float) from_float_fn;
  decltype(&::pbops::activate) activate_fn;
  decltype(&::pbops::read_sum) read_sum_fn;
  decltype(&::pbops::gather_probe) gather_probe_fn;
  decltype(&::pbops::rms_norm) rms_norm_fn;
  decltype(&::pbops::gated_activation) gated_activation_fn;
  decltype(&::pbops::decode_attention) decode_attention_fn;
};

const KernelTable& avx512_bf16_kernels();
const KernelTable& avx512_kernels();
const KernelTable& avx2_kernels();
const KernelTable& portable_kernels();

}  // namespace pbops

namespace pbops {

// Names of the paths this CPU can run, best first ("avx512_bf16", "avx512", "avx2",
// "portable").
const char* const* supported_isas(int* count);
// The path the kernels use now (the best supported one until set_isa is called).
const char* current_isa();
// Use path `name` from now on; false (and no change) when it is unknown or unsupported.
bool set_isa(const char* name);

}  // namespace pbops
