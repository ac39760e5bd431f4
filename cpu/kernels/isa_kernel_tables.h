// The kernel tables of each SIMD level, one level per translation unit (isa_portable.cpp, isa_avx2.cpp,
// isa_avx512.cpp). Internal to kvx_cpu_kernels: callers go through cpu_kernels.h, which checks the machine first.
#pragma once

#include "kernels/baseline_kernels.h"
#include "kernels/kernels.h"

namespace kvx::cpu {

// One level's kernels: what the forward pass runs, and the contiguous-cache baselines beside them.
struct IsaTables {
    const KernelTable& kernels;
    const BaselineKernelTable& baselines;
};

namespace portable {
const IsaTables& tables();
}

// Only built for x86 (KVX_CPU_X86_SIMD), and only to be called where the CPU has the instructions.
namespace avx2 {
const IsaTables& tables();
}
namespace avx512 {
const IsaTables& tables();
}

}  // namespace kvx::cpu
