// The backend's cuBLAS calls (cuda/backend/blas.cpp) against the reference matmul: shapes where n, k and m all
// differ, so that a swapped operation, size or leading dimension gives wrong numbers or reads out of bounds.
// On a GPU this holds blas.cpp to cuBLAS; under the CUDA emulation, to the emulation's cuBLAS, which follows
// cuBLAS's documented semantics (tools/cuda_emulation/cublas.cpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "cuda/backend/blas.h"
#include "cuda/kernels/test_buffers.h"
#include "cuda/kernels/test_support.h"
#include "kernels/kernels.h"

namespace {

using namespace kvx::cuda::test;

struct Shape {
    int n, k, m;
};
constexpr Shape kShapes[] = {{9, 33, 17}, {1, 64, 5}, {40, 7, 3}, {17, 128, 96}};

class Stream {
public:
    Stream() { kvx::cuda::check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
    ~Stream() { cudaStreamDestroy(stream_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

}  // namespace

TEST_CASE("cuBLAS fp32 products are the reference matmul", "[cuda][blas]") {
    const Stream stream;
    kvx::cuda::Blas blas(stream.get());
    for (const Shape& s : kShapes) {
        INFO("n " << s.n << " k " << s.k << " m " << s.m);
        const std::vector<float> x = random_floats(size_t(s.n) * size_t(s.k), 1);
        const std::vector<float> w = random_floats(size_t(s.m) * size_t(s.k), 2);
        std::vector<float> want(size_t(s.n) * size_t(s.m));
        kvx::reference_kernels().matmul(want.data(), x.data(), w.data(), s.n, s.k, s.m);
        auto dx = to_device(x), dw = to_device(w);
        auto out = poisoned<float>(want.size());
        blas.matmul_f32(out.data(), dx.data(), dw.data(), s.n, s.k, s.m);
        kvx::cuda::check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
        CHECK(relative_error(to_host(out), want) <= kFp32Tolerance);
    }
}

// x is rounded to fp16 before cublasGemmEx: the reference gets the same rounded x, and the products of two
// fp16 values are exact in fp32, so only the order of the fp32 sums differs.
TEST_CASE("cuBLAS fp16 products are the reference matmul_f16 of the rounded input", "[cuda][blas]") {
    const Stream stream;
    kvx::cuda::Blas blas(stream.get());
    for (const Shape& s : kShapes) {
        INFO("n " << s.n << " k " << s.k << " m " << s.m);
        const std::vector<float> x = random_floats(size_t(s.n) * size_t(s.k), 3);
        const std::vector<uint16_t> w16 = to_f16(random_floats(size_t(s.m) * size_t(s.k), 4));
        const std::vector<float> x_rounded = f16_to_floats(to_f16(x));
        std::vector<float> want(size_t(s.n) * size_t(s.m));
        kvx::reference_kernels().matmul_f16(want.data(), x_rounded.data(), w16.data(), s.n, s.k, s.m);
        auto dx = to_device(x);
        auto dw = to_device(w16);
        auto x_f16 = poisoned<uint16_t>(x.size());
        auto out = poisoned<float>(want.size());
        blas.matmul_f16(out.data(), dx.data(), dw.data(), x_f16.data(), s.n, s.k, s.m);
        kvx::cuda::check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
        CHECK(relative_error(to_host(out), want) <= kFp32Tolerance);
    }
}
