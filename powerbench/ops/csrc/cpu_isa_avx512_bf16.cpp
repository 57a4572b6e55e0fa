// The AVX-512 path with AVX512-BF16 (vdpbf16ps): the avx512 kernels, except that bf16 rows
// dotted with several tokens whose inputs are exact bf16 values use the bf16 dot product
// (two products per fp32 lane, half the instructions of convert-and-FMA; see
// dot_rows_tokens_bf16 in sparse_cpu_kernels_impl.h). Only called on a CPU that has
// avx512_bf16 (cpu_dispatch.cpp checks CPUID); POWERBENCH_CPU_ISA=avx512 forces the
// convert-and-FMA fallback.
#include "cpu_isa_std.h"

#pragma GCC push_options
// GCC 12 warns about the intrinsics' own _mm512_undefined_* operands (GCC PR105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,f16c,bmi,bmi2")
#include <immintrin.h>

#define PBOPS_ISA isa_avx512_bf16
#define PBOPS_ISA_NAME "avx512_bf16"
#define PBOPS_ISA_SIMD "simd_avx512.h"
#define PBOPS_BF16_DOT 1
#include "cpu_isa_impl.h"

namespace pbops {
const KernelTable& avx512_bf16_kernels() { return isa_avx512_bf16::kTable; }
}  // namespace pbops
#pragma GCC pop_options
