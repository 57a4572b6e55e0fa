// The AVX-512 path (F, BW, DQ, VL; fp16 via vcvtph2ps): 16-lane kernels. Only called on a
// CPU that has these (cpu_dispatch.cpp checks CPUID).
#include "cpu_isa_std.h"

#pragma GCC push_options
// GCC 12 warns about the intrinsics' own _mm512_undefined_* operands (GCC PR105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2")
#include <immintrin.h>

#define PBOPS_ISA isa_avx512
#define PBOPS_ISA_NAME "avx512"
#define PBOPS_ISA_SIMD "simd_avx512.h"
#include "cpu_isa_impl.h"

namespace pbops {
const KernelTable& avx512_kernels() { return isa_avx512::kTable; }
}  // namespace pbops
#pragma GCC pop_options
