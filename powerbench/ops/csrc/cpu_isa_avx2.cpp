// The AVX2 path (AVX2, FMA, F16C): 8-lane kernels. Only called on a CPU that has these
// (cpu_dispatch.cpp checks CPUID).
#include "cpu_isa_std.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#include <immintrin.h>

#define PBOPS_ISA isa_avx2
#define PBOPS_ISA_NAME "avx2"
#define PBOPS_ISA_SIMD "simd_avx2.h"
#include "cpu_isa_impl.h"

namespace pbops {
const KernelTable& avx2_kernels() { return isa_avx2::kTable; }
}  // namespace pbops
#pragma GCC pop_options
