// The kernel table of each SIMD level, one per translation unit (isa_portable.cpp, isa_avx2.cpp,
// isa_avx512.cpp). Internal to kvx_cpu: callers go through cpu_kernels.h, which checks the machine first.
#pragma once

#include "kernels/kernels.h"

namespace kvx::cpu {

namespace portable {
const KernelTable& kernel_table();
}

// Only built for x86 (KVX_CPU_X86_SIMD), and only to be called where the CPU has the instructions.
namespace avx2 {
const KernelTable& kernel_table();
}
namespace avx512 {
const KernelTable& kernel_table();
}

}  // namespace kvx::cpu
