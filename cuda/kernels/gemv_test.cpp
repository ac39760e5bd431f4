// cuda/kernels/gemv.cu's bias against the reference matmul / matmul_f16 followed by add_bias, every row count
// 1 .. 8 (every instantiation, 1, 2, 4 and 8 rows, with its masked rows) on the vector and the scalar path; and
// its argument checks. The products without a bias, at every row count, awkward depth and alignment, are the
// kernel ops harness's (tests/kernel_ops/).
//
// Tolerance: 1e-5 for fp16 weights as for fp32. fp16 weights convert to fp32 exactly, so both differ from the
// double-precision reference only by fp32 summation, about sqrt(k) ulp relative.
#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/test_buffers.h"
#include "cuda/kernels/test_support.h"
#include "kernels/error.h"
#include "kernels/kernels.h"

namespace {

using namespace kvx::cuda::test;

const kvx::KernelTable& reference = kvx::reference_kernels();

struct GemvCase {
    int n, k, m;
    bool with_bias;
    size_t x_offset, w_offset;  // elements before x, and before w (fp32 and fp16): 1 forces the scalar path
};

// out [n][m] from both kernels, against the reference's; returns nothing, checks inside.
void check_gemv(const GemvCase& c) {
    INFO("n " << c.n << " k " << c.k << " m " << c.m << (c.with_bias ? " with bias" : "") << " x offset " << c.x_offset
              << " w offset " << c.w_offset);
    const size_t nk = static_cast<size_t>(c.n) * static_cast<size_t>(c.k);
    const size_t mk = static_cast<size_t>(c.m) * static_cast<size_t>(c.k);
    const size_t nm = static_cast<size_t>(c.n) * static_cast<size_t>(c.m);
    const std::vector<float> x = random_floats(nk, 1);
    const std::vector<float> w = random_floats(mk, 2);
    const std::vector<uint16_t> w16 = to_f16(w);
    const std::vector<float> bias = random_floats(static_cast<size_t>(c.m), 3);

    std::vector<float> want(nm), want16(nm);
    reference.matmul(want.data(), x.data(), w.data(), c.n, c.k, c.m);
    reference.matmul_f16(want16.data(), x.data(), w16.data(), c.n, c.k, c.m);
    if (c.with_bias) {
        reference.add_bias(want.data(), bias.data(), c.n, c.m);
        reference.add_bias(want16.data(), bias.data(), c.n, c.m);
    }

    OffsetBuffer<float> dx(x, c.x_offset), dw(w, c.w_offset);
    OffsetBuffer<uint16_t> dw16(w16, c.w_offset);
    auto dbias = to_device(bias);
    const float* b = c.with_bias ? dbias.data() : nullptr;
    auto out = poisoned<float>(nm);
    kvx::cuda::gemv_f32(out.data(), dx.data(), dw.data(), b, c.n, c.k, c.m, nullptr);
    CHECK(relative_error(to_host(out), want) <= kFp32Tolerance);
    poison(out);
    kvx::cuda::gemv_f16(out.data(), dx.data(), dw16.data(), b, c.n, c.k, c.m, nullptr);
    CHECK(relative_error(to_host(out), want16) <= kFp32Tolerance);
}

TEST_CASE("gemv_f32 and gemv_f16 add the bias as the reference add_bias does") {
    SECTION("gemv_f32 and gemv_f16 add the bias for every row count, on the vector and the scalar path") {
        // Without a bias, every row count, depth and alignment is the kernel ops harness's (tests/kernel_ops/).
        for (int n = 1; n <= kvx::cuda::kGemvMaxRows; ++n)
            for (int k : {7, 576}) check_gemv({n, k, 49, true, 0, static_cast<size_t>(n % 2)});
    }
    SECTION("gemv rejects row counts outside 1 .. kGemvMaxRows with kvx::Error") {
        for (int n : {0, -1, kvx::cuda::kGemvMaxRows + 1}) {
            CHECK_THROWS_AS(kvx::cuda::gemv_f32(nullptr, nullptr, nullptr, nullptr, n, 8, 8, nullptr), kvx::Error);
            CHECK_THROWS_AS(kvx::cuda::gemv_f16(nullptr, nullptr, nullptr, nullptr, n, 8, 8, nullptr), kvx::Error);
        }
    }
}

}  // namespace
