// The kernel tables of each SIMD level, one level per translation unit (isa_portable.cpp, isa_avx2.cpp,
// isa_avx512.cpp, isa_avx512_vnni.cpp). Internal to kvx_cpu_kernels: callers go through cpu_kernels.h, which checks the machine first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/baseline_kernels.h"
#include "kernels/f16_row_groups.h"
#include "kernels/kernels.h"

namespace kvx::cpu {

// One level's kernels: what the forward pass runs, and the contiguous-cache baselines beside them.
struct IsaTables {
    const KernelTable& kernels;
    const BaselineKernelTable& baselines;
};

// A buffer of at least `bytes` owned by the calling thread, valid until its next call: the quantized matmul's
// rounded activations. It only grows, so after the first calls of a forward pass nothing is allocated.
// Defined once, outside the ISA units (an allocation is standard-library code; see isa_avx2.cpp).
uint8_t* quant_scratch(size_t bytes);

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
namespace avx512_vnni {
const IsaTables& tables();
}

}  // namespace kvx::cpu
