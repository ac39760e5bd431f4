// cuBLAS for the matrix products too large for the decode GEMV: one handle, bound to the backend's stream,
// with a fixed workspace so that its calls can be captured in a CUDA graph (cuBLAS must not allocate during
// a capture).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/device_buffer.h"

namespace kvx::cuda {

// Throws kvx::Error "cuBLAS error in WHAT: ..." unless status is CUBLAS_STATUS_SUCCESS.
void check(cublasStatus_t status, const char* what);

class Blas {
public:
    explicit Blas(cudaStream_t stream);
    ~Blas();
    Blas(const Blas&) = delete;
    Blas& operator=(const Blas&) = delete;

    // out [n][m] = x [n][k] . w [m][k]^T in fp32. TF32 stays off (CUBLAS_DEFAULT_MATH), so the products are
    // fp32 FMAs like the CPU's, in another order.
    void matmul_f32(float* out, const float* x, const float* w, int n, int k, int m);
    // The same with w [m][k] in fp16: x is rounded to fp16 into x_f16 [n][k] and cublasGemmEx multiplies on
    // the tensor cores with fp32 accumulation and fp32 output (cuBLAS has no fp32 x fp16 product).
    void matmul_f16(float* out, const float* x, const uint16_t* w, uint16_t* x_f16, int n, int k, int m);

private:
    cublasHandle_t handle_ = nullptr;
    cudaStream_t stream_;
    DeviceBuffer<std::byte> workspace_;  // [kWorkspaceBytes], cuBLAS's scratch (cublasSetWorkspace)
};

}  // namespace kvx::cuda
