// The portable path: plain C++ for the baseline target (any x86-64), exact software fp16
// conversions. Slower; for CPUs without AVX2 and as the reference the other paths are
// tested beside.
#include "cpu_isa_std.h"

#define PBOPS_ISA isa_portable
#define PBOPS_ISA_NAME "portable"
#define PBOPS_ISA_SIMD "simd_portable.h"
#include "cpu_isa_impl.h"

namespace pbops {
const KernelTable& portable_kernels() { return isa_portable::kTable; }
}  // namespace pbops
