// The harness on the CUDA launch functions (cuda_host_kernels.h), on a GPU or the CPU emulation. Where no
// usable GPU is present it exits 77, which ctest reports as skipped, after saying why (as the CUDA tests do).
// `kvx_cuda_kernel_ops [op]` runs the ops whose name contains op.
#include <cstdio>
#include <string>

#include "cuda/kernels/device_probe.h"
#include "tests/kernel_ops/cuda_host_kernels.h"

int main(int argc, char* argv[]) {
    constexpr int kSkipExitCode = 77;
    const std::string why = kvx::cuda::unavailable_reason();
    if (!why.empty()) {
        std::printf("SKIP: %s; the CUDA kernel ops need an NVIDIA GPU (sm_70 or newer) or the emulation build\n", why.c_str());
        return kSkipExitCode;
    }
    std::printf("CUDA device: %s\n", kvx::cuda::device_description().c_str());
    return kvx::ops::run_table({kvx::ops::cuda_implementation()}, argc > 1 ? argv[1] : "") == 0 ? 0 : 1;
}
