#include "cuda/kernels/device_probe.h"

#include <cstdio>

#include "cuda/kernels/cuda_check.h"

namespace kvx::cuda {

std::string unavailable_reason() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        cudaGetLastError();  // the probe's failure must not leak into the next check_launch
        return "no usable CUDA device (" + describe(status) + ")";
    }
    if (count == 0) return "no CUDA device is present";
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cannot query CUDA device 0";
    if (prop.major < 7) return std::string("CUDA device 0 (") + prop.name + ") is older than sm_70";
    return {};
}

std::string device_description() {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    char detail[96];
    std::snprintf(detail, sizeof detail, " (sm_%d%d, %d SMs, %.1f GiB)", prop.major, prop.minor,
                  prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return std::string(prop.name) + detail;
}

}  // namespace kvx::cuda
