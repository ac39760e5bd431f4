// The cuBLAS calls kvx makes, by cuBLAS's documented semantics, so that a wrong operation, size or leading
// dimension in the caller gives wrong numbers here as on the GPU:
//   C = alpha * op(A) * op(B) + beta * C, column-major, C m x n, op(A) m x k, op(B) k x n,
//   element (i, j) of a matrix with leading dimension ld at [i + j * ld], op = N (as stored) or T (transposed);
//   beta == 0 means C is not read; alpha and beta are host scalars read at the call (a capture keeps them).
// Leading dimensions below the stored rows are refused (CUBLAS_STATUS_INVALID_VALUE, as cuBLAS does), and
// every operand must lie inside a device allocation. Products accumulate in fp32, in another order than the
// GPU's. Anything else (other types, device pointer mode, other calls) is refused by name or not linked.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/f16.h"
#include "tools/cuda_emulation/emu_device.h"
#include "tools/cuda_emulation/emu_runtime.h"

struct cublasContext {
    cudaStream_t stream = nullptr;
};

namespace {

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; }

// The bytes a stored rows x cols column-major matrix with leading dimension ld spans.
size_t span_bytes(int rows, int cols, int ld, size_t elem) {
    if (rows == 0 || cols == 0) return 0;
    return (static_cast<size_t>(cols - 1) * static_cast<size_t>(ld) + static_cast<size_t>(rows)) * elem;
}

template <class TA, class TB>
cublasStatus_t gemm(const char* name, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                    int n, int k, float alpha, const TA* a, int lda, const TB* b, int ldb, float beta, float* c,
                    int ldc) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    const int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
    const int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
    if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    const std::string what(name);
    if (k > 0 && m > 0 && n > 0) {
        emu_require_device(a, span_bytes(a_rows, a_cols, lda, sizeof(TA)), (what + " A").c_str());
        emu_require_device(b, span_bytes(b_rows, b_cols, ldb, sizeof(TB)), (what + " B").c_str());
    }
    emu_require_device(c, span_bytes(m, n, ldc, sizeof(float)), (what + " C").c_str());
    auto value = [](auto x) {
        if constexpr (std::is_same_v<std::remove_cv_t<std::remove_reference_t<decltype(x)>>, uint16_t>)
            return kvx::f16_to_f32(x);
        else
            return static_cast<float>(x);
    };
    const size_t sa = static_cast<size_t>(lda), sb = static_cast<size_t>(ldb), sc = static_cast<size_t>(ldc);
    const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    emu_enqueue(handle->stream, [=] {
        for (size_t j = 0; j < static_cast<size_t>(n); ++j)
            for (size_t i = 0; i < static_cast<size_t>(m); ++i) {
                float sum = 0.0f;
                for (size_t l = 0; l < static_cast<size_t>(k); ++l) {
                    const float x = value(ta ? a[l + i * sa] : a[i + l * sa]);
                    const float y = value(tb ? b[j + l * sb] : b[l + j * sb]);
                    sum += x * y;
                }
                float& out = c[i + j * sc];
                out = beta == 0.0f ? alpha * sum : alpha * sum + beta * out;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    *handle = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}
// The workspace must be device memory of the size given; the emulation needs none.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes) emu_require_device(workspace, bytes, "cublasSetWorkspace");
    return CUBLAS_STATUS_SUCCESS;
}
// Only the default math mode (no TF32): the emulation's fp32 products are what it promises.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_DEFAULT_MATH) emu_fail(("cublasSetMathMode: mode " + std::to_string(mode) + " is not emulated").c_str());
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                              const float* beta, float* c, int ldc) {
    return gemm("cublasSgemm", handle, transa, transb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc);
}

// fp16 or fp32 A and B, fp32 C, fp32 compute: the combinations kvx uses.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (c_type != CUDA_R_32F || (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC) ||
        a_type != b_type || (a_type != CUDA_R_16F && a_type != CUDA_R_32F))
        emu_fail("cublasGemmEx: only fp16 or fp32 inputs with fp32 output and fp32 compute are emulated");
    const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    auto* out = static_cast<float*>(c);
    if (a_type == CUDA_R_16F)
        return gemm("cublasGemmEx", handle, transa, transb, m, n, k, al, static_cast<const uint16_t*>(a), lda,
                    static_cast<const uint16_t*>(b), ldb, be, out, ldc);
    return gemm("cublasGemmEx", handle, transa, transb, m, n, k, al, static_cast<const float*>(a), lda,
                static_cast<const float*>(b), ldb, be, out, ldc);
}

const char* cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    default: return "CUBLAS_STATUS (not named by the emulation)";
    }
}
const char* cublasGetStatusString(cublasStatus_t status) {
    return status == CUBLAS_STATUS_SUCCESS ? "success" : "an error of the emulated cuBLAS (see its name)";
}

}  // extern "C"
