// The CUDA launch functions (cuda/kernels/cuda_kernels.h) as a KernelTable over host memory, for the harness:
// each entry copies its host buffers to the device (keeping each pointer's offset from a 16-byte boundary, so
// a misaligned host buffer reaches the kernels' scalar paths), launches, and copies the outputs back.
//
// What the launch functions do not cover is left null or is the harness's to skip (Implementation):
// matmuls (the backend runs its parts as GEMVs), more rows than kGemvMaxRows (cuBLAS), quantized row groups.
#pragma once

#include "tests/kernel_ops/op_harness.h"

namespace kvx::ops {

Implementation cuda_implementation();

}  // namespace kvx::ops
