// cuda/kernels/gemv.cu against the reference matmul / matmul_f16 followed by add_bias: every row count 1 .. 8 (so every
// instantiation, 1, 2, 4 and 8 rows, with its masked rows), depths that leave every remainder of the vector
// loop (k = 1, 7, 100, 576, 1536, 2049: the vector path where k divides by the vector width, the scalar path
// elsewhere), and weights, inputs or both one element off 16-byte alignment (the scalar path at a
// vector-friendly k).
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

TEST_CASE("gemv_f32 and gemv_f16 match the reference matmul and add_bias") {
    SECTION("gemv_f32 and gemv_f16 match the reference for every row count and awkward depths") {
        for (int n = 1; n <= kvx::cuda::kGemvMaxRows; ++n)
            for (int k : {1, 7, 100, 576, 1536, 2049})
                for (int m : {3, 49})
                    for (bool with_bias : {false, true}) check_gemv({n, k, m, with_bias, 0, 0});
    }
    SECTION("gemv covers one output row, rows past the last block's warps, and many blocks") {
        for (int n : {1, 3, 5, 8})
            for (int k : {7, 576, 2049})
                for (int m : {1, 1000}) check_gemv({n, k, m, true, 0, 0});
    }
    SECTION("gemv takes the scalar path when weights or inputs or both are unaligned at a vector-friendly depth") {
        // Each pointer alone too: the kernel's 16-byte loads of x and of w each need their own check.
        const std::pair<size_t, size_t> offsets[] = {{1, 1}, {1, 0}, {0, 1}};  // x, w
        for (int n : {1, 2, 4, 7})
            for (int k : {576, 1536})
                for (const auto& [x_offset, w_offset] : offsets) check_gemv({n, k, 49, n % 2 == 0, x_offset, w_offset});
    }
    SECTION("gemv rejects row counts outside 1 .. kGemvMaxRows with kvx::Error") {
        for (int n : {0, -1, kvx::cuda::kGemvMaxRows + 1}) {
            CHECK_THROWS_AS(kvx::cuda::gemv_f32(nullptr, nullptr, nullptr, nullptr, n, 8, 8, nullptr), kvx::Error);
            CHECK_THROWS_AS(kvx::cuda::gemv_f16(nullptr, nullptr, nullptr, nullptr, n, 8, 8, nullptr), kvx::Error);
        }
    }
}

}  // namespace
