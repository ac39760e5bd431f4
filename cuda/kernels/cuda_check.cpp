#include "cuda/kernels/cuda_check.h"

#include "kernels/error.h"

namespace kvx::cuda {

std::string describe(cudaError_t status) {
    return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw Error(std::string("CUDA error in ") + what + " (" + describe(status) + ")");
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace kvx::cuda
