// CPU emulation of the CUDA device features kvx's kernels use, force-included (-include) into each .cu that
// rewrite.py turned into C++. A block's threads run as fibers on the launching host thread, switching only
// where CUDA threads wait for each other (__syncthreads, warp shuffles); blocks run one at a time, so
// `__shared__` variables become function statics (one block's worth of storage). The scheduler, the launch
// checks and the runtime API live in fibers.cpp and runtime.cpp; tools/cuda_emulation/README.md says what
// this can and cannot see.
#pragma once
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#undef __align__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x) alignas(x)
#define __restrict__

#include "tools/cuda_emulation/emu_device.h"

// Host side: a kernel's identity (for cudaFuncSetAttribute's per-kernel limits) and its launch.
template <class Kernel>
EmuKernelId emu_kernel_id(Kernel* kernel) { return reinterpret_cast<EmuKernelId>(kernel); }

// What rewrite.py passes for a launch that deduces a kernel template's arguments (no address to take): the
// default limits apply to it, as cudaFuncSetAttribute cannot name it either.
inline constexpr void (*emu_deduced_kernel)() = nullptr;

template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
    return emu_func_set_attribute(emu_kernel_id(kernel), attribute, value);
}

// rewrite.py turns `kernel<<<grid, block, smem, stream>>>(args)` into `emu_launch(&kernel, [=] { kernel(args); },
// grid, block, smem, stream)`: the arguments are copied at launch, as CUDA copies them, so a captured graph
// replays the launch with the values of its capture.
template <class Kernel, class Body, class G, class B>
void emu_launch(Kernel* kernel, Body body, G grid, B block, size_t smem_bytes = 0, cudaStream_t stream = nullptr) {
    emu_launch_erased(emu_kernel_id(kernel), std::function<void()>(std::move(body)), dim3(grid), dim3(block),
                      smem_bytes, stream);
}
