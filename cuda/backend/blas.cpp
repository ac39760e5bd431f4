#include "cuda/backend/blas.h"

#include <string>

#include "cuda/kernels/cuda_kernels.h"
#include "kernels/error.h"

namespace kvx::cuda {
namespace {

// cuBLAS's own recommendation for Hopper is 32 MiB; less only restricts its choice of kernels.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

}  // namespace

void check(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string("cuBLAS error in ") + what + " (" + cublasGetStatusName(status) + ": " +
                    cublasGetStatusString(status) + ")");
}

Blas::Blas(cudaStream_t stream) : stream_(stream), workspace_(kWorkspaceBytes) {
    check(cublasCreate(&handle_), "cublasCreate");
    try {
        check(cublasSetStream(handle_, stream_), "cublasSetStream");
        check(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
        check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    } catch (...) {
        cublasDestroy(handle_);
        throw;
    }
}

Blas::~Blas() { cublasDestroy(handle_); }

// Row-major out [n][m] is column-major m x n; w [m][k] row-major is column-major k x m, so
// out = op_T(w) . x in cuBLAS's terms, with leading dimensions k, k and m.
void Blas::matmul_f32(float* out, const float* x, const float* w, int n, int k, int m) {
    const float one = 1.0f, zero = 0.0f;
    check(cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, k, x, k, &zero, out, m), "cublasSgemm");
}

void Blas::matmul_f16(float* out, const float* x, const uint16_t* w, uint16_t* x_f16, int n, int k, int m) {
    f32_to_f16(x_f16, x, int64_t{n} * k, stream_);
    const float one = 1.0f, zero = 0.0f;
    check(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, CUDA_R_16F, k, x_f16, CUDA_R_16F, k, &zero,
                       out, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
}

}  // namespace kvx::cuda
