// The quantized matmul's properties beyond agreeing with its oracles (which the kernel ops harness checks for
// every form, rounding and shape: tests/kernel_ops/), on every SIMD level: row groups (kernels/quant_row_groups.h)
// hold every integer and scale where the format says and give every level the same bits; a row gets the same
// bits whatever the rows beside it and the threads; a quantized part of matmuls gets its own matmul_q's bits.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <utility>
#include <random>
#include <vector>

#include "cpu/kernels/test_support.h"
#include "kernels/f16.h"
#include "kernels/kernels.h"
#include "kernels/quant_row_groups.h"

namespace {

using kvx::KernelTable;
using kvx::MatmulPart;
using kvx::QuantMatrix;
using kvx::QuantLayout;
using kvx::QuantOffset;
using kvx::QuantScales;
using kvx::QuantXRounding;
using kvx::QuantRowGroups;
using kvx::cpu::testing::for_each_level;
using kvx::cpu::testing::nan_filled;
using kvx::cpu::testing::random_floats;
using kvx::testing::RandomQuant;
using kvx::cpu::testing::ThreadCount;

struct QuantShape {
    int bits = 4;
    int block = 32;
    QuantOffset offset = QuantOffset::none;
    bool f16 = false;
    QuantScales scales = f16 ? QuantScales::f16 : QuantScales::f32;
    QuantXRounding x_rounding = QuantXRounding::onnxruntime;
};

// matmul_q of r's matrix, or of w (r's copied into another layout) when given.
std::vector<float> run_matmul_q(const KernelTable& kernels, const std::vector<float>& x, const RandomQuant& r, int n,
                                const QuantMatrix* w = nullptr) {
    std::vector<float> out = nan_filled(static_cast<size_t>(n) * r.m);  // [n][m]
    kernels.matmul_q(out.data(), x.data(), w ? *w : r.w, n, r.k, r.m);
    return out;
}

// The forms row groups take (kernels/quant_row_groups.h): {bits, block}.
constexpr std::pair<int, int> kRowGroupForms[] = {{4, 32}, {8, 32}, {8, 16}};

// Every scale type (kernels/quant_matrix.h): fp32, fp16, and int8 multipliers of fp16 bases per 256.
constexpr QuantScales kScaleTypes[] = {QuantScales::f32, QuantScales::f16, QuantScales::i8_of_f16};

// r's matrix of m rows, copied into row groups of `bits`: every integer and every dequantized row as in rows.
void check_row_groups_hold(const RandomQuant& r, int m, int k, int bits) {
    const QuantRowGroups groups(r.w, m);
    const QuantMatrix& g = groups.matrix();
    REQUIRE(g.layout == QuantLayout::row_groups);
    REQUIRE(g.bits == bits);
    std::vector<float> row(static_cast<size_t>(k)), grouped_row(row.size());
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < r.w.padded_cols; ++j) REQUIRE(kvx::quant_value(g, i, j) == kvx::quant_value(r.w, i, j));
        kvx::dequantize_row(r.w, i, k, row.data());
        kvx::dequantize_row(g, i, k, grouped_row.data());
        REQUIRE(grouped_row == row);
    }
}

TEST_CASE("row groups hold every integer and scale where the format says", "[matmul_q][row_groups]") {
    for (auto [bits, block] : kRowGroupForms)
    for (QuantOffset offset : {QuantOffset::none, QuantOffset::mins})
    for (int m : {1, 7, 8, 9, 20})
        for (int k : {1, 32, 100, 600})  // 600: three bases per row, the last for fewer than 256
            for (QuantScales scales : kScaleTypes)
                check_row_groups_hold(RandomQuant(m, k, bits, block, offset, scales, static_cast<uint32_t>(m * 100 + k + bits + block)),
                                      m, k, bits);
}

// GGUF's Q6_K as kvx keeps it: q8 in blocks of 16 with int8 scales and integers in -32..31, whose row groups are
// q6 (kernels/quant_row_groups.h, row_groups_bits); Q3_K's too.
RandomQuant six_bit_matrix(int m, int k, uint32_t seed) {
    return RandomQuant(m, k, 8, 16, QuantOffset::none, QuantScales::i8_of_f16, seed, true);
}

TEST_CASE("q6 row groups hold every integer and scale where the format says", "[matmul_q][row_groups]") {
    for (int m : {1, 7, 8, 9, 20})
        for (int k : {1, 16, 100, 600}) check_row_groups_hold(six_bit_matrix(m, k, static_cast<uint32_t>(m * 100 + k)), m, k, 6);
}

// The same integers in 6 bits or 8 give the same exact block dot products, hence the same bits, alone, in a
// prefill's rows, in blocks of rows and on 1 or 2 threads; x with a scale per 32 or per 256 (a sum per base:
// quant_row_groups.inc).
TEST_CASE("matmul_q over q6 row groups gives q8 row groups' bits", "[matmul_q][row_groups][threads]") {
    for_each_level([](const KernelTable& kernels) {
        for (QuantXRounding rounding : {QuantXRounding::onnxruntime, QuantXRounding::ggml_k})
        for (int n : {1, 3, 9, 40})
            for (int k : {33, 576, 2048})
                for (int threads : {1, 2}) {
                    const ThreadCount scope(threads);
                    const int m = 40;
                    RandomQuant r = six_bit_matrix(m, k, static_cast<uint32_t>(n * 7 + k));
                    r.w.x_rounding = rounding;
                    QuantMatrix q8_form = r.w;
                    q8_form.six_bit_values = false;
                    const QuantRowGroups q6(r.w, m), q8(q8_form, m);
                    REQUIRE(q6.matrix().bits == 6);
                    REQUIRE(q8.matrix().bits == 8);
                    const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, static_cast<uint32_t>(k + n));
                    INFO("n=" << n << " k=" << k << " threads " << threads << " x rounding " << static_cast<int>(rounding));
                    CHECK(run_matmul_q(kernels, x, r, n, &q6.matrix()) == run_matmul_q(kernels, x, r, n, &q8.matrix()));
                }
    });
}

// Row groups: one exact integer per block and the same fp32 steps on every level, so the same bits; for int8
// scales also with x's scale per 256 (a sum per base).
TEST_CASE("matmul_q over row groups gives every level the same bits", "[matmul_q][row_groups]") {
    for (auto [bits, block] : kRowGroupForms)
    for (QuantOffset offset : {QuantOffset::none, QuantOffset::mins})
    for (int n : {1, 3, 9})
        for (int k : {33, 576})
            for (QuantScales scales : kScaleTypes)
            for (QuantXRounding rounding : {QuantXRounding::onnxruntime, QuantXRounding::ggml_k}) {
                if (rounding == QuantXRounding::ggml_k && scales != QuantScales::i8_of_f16) continue;
                const int m = 29;
                RandomQuant r(m, k, bits, block, offset, scales, static_cast<uint32_t>(n * 7 + k + bits + block));
                r.w.x_rounding = rounding;
                const QuantRowGroups groups(r.w, m);
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, static_cast<uint32_t>(k));
                std::vector<float> first;
                for_each_level([&](const KernelTable& kernels) {
                    const std::vector<float> out = run_matmul_q(kernels, x, r, n, &groups.matrix());
                    if (first.empty()) first = out;
                    INFO("q" << bits << " block " << block << (offset == QuantOffset::mins ? " mins" : "") << " n=" << n << " k=" << k
                              << " scale type " << static_cast<int>(scales) << " x rounding " << static_cast<int>(rounding));
                    CHECK(out == first);
                });
            }
}

// The same bits for a row of x alone (the GEMV) and among others (the GEMM), and on 1 and 2 threads.
TEST_CASE("matmul_q gives a row the same bits whatever the rows beside it and the threads", "[matmul_q][rows][threads]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 5000;
        for (QuantShape shape : {QuantShape{4, 32, QuantOffset::none, true}, QuantShape{8, 32, QuantOffset::none, true},
                                 QuantShape{8, 16, QuantOffset::none, false},
                                 QuantShape{8, 16, QuantOffset::zero_points, false},
                                 QuantShape{4, 64, QuantOffset::mins, false},
                                 QuantShape{4, 32, QuantOffset::mins, false, QuantScales::i8_of_f16},
                                 QuantShape{8, 16, QuantOffset::none, false, QuantScales::i8_of_f16},
                                 QuantShape{8, 16, QuantOffset::none, false, QuantScales::i8_of_f16, QuantXRounding::ggml_k},
                                 QuantShape{8, 32, QuantOffset::none, false, QuantScales::i8_of_f16, QuantXRounding::ggml_k}})
            for (int k : {33, 576, 1100}) {
                const int n = 9, m = 131;
                RandomQuant r(m, k, shape.bits, shape.block, shape.offset, shape.scales, ++seed);
                r.w.x_rounding = shape.x_rounding;
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, ++seed);
                const bool fits = kvx::row_groups_fit(r.w);
                const std::unique_ptr<QuantRowGroups> groups = fits ? std::make_unique<QuantRowGroups>(r.w, m) : nullptr;
                for (const QuantMatrix* w : {static_cast<const QuantMatrix*>(&r.w), fits ? &groups->matrix() : nullptr}) {
                    if (!w) continue;
                    std::vector<float> one_thread, two_threads;
                    {
                        const ThreadCount scope(1);
                        one_thread = run_matmul_q(kernels, x, r, n, w);
                    }
                    {
                        const ThreadCount scope(2);
                        two_threads = run_matmul_q(kernels, x, r, n, w);
                    }
                    INFO("k=" << k << " q" << shape.bits << " block " << shape.block << (w != &r.w ? " row groups" : "")
                              << " x rounding " << static_cast<int>(shape.x_rounding));
                    CHECK(one_thread == two_threads);
                    for (int row = 0; row < n; ++row) {
                        const std::vector<float> alone_x(x.begin() + int64_t{row} * k, x.begin() + int64_t{row + 1} * k);
                        const std::vector<float> alone = run_matmul_q(kernels, alone_x, r, 1, w);
                        CHECK(std::equal(alone.begin(), alone.end(), one_thread.begin() + int64_t{row} * m));
                    }
                }
            }
    });
}

// Row groups take x in blocks of rows (32 at k 16384: quant_row_groups.inc's row_group_x_block) and tiles of
// rows (QuantizedX's tiled arrays), and on AVX-512 groups two at a time: a row's bits are still its own GEMV's,
// on 1 and 2 threads. m 40 is 5 groups, the last pair half padding (kernels/quant_row_groups.h,
// row_group_count); n 37 leaves a last tile of fewer rows. As Q4_K, and as Q6_K (q6, a sum per base).
TEST_CASE("matmul_q over row groups gives a row its bits in any block of rows", "[matmul_q][row_groups][threads]") {
    for_each_level([](const KernelTable& kernels) {
        const int k = 16384, m = 40;
        RandomQuant q4k(m, k, 4, 32, QuantOffset::mins, QuantScales::i8_of_f16, 6000);
        RandomQuant q6k = six_bit_matrix(m, k, 6002);
        q6k.w.x_rounding = QuantXRounding::ggml_k;
        for (const RandomQuant* r : {&q4k, &q6k}) {
            const QuantRowGroups groups(r->w, m);
            for (int n : {40, 37}) {
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, 6001);
                for (int threads : {1, 2}) {
                    const ThreadCount scope(threads);
                    const std::vector<float> all = run_matmul_q(kernels, x, *r, n, &groups.matrix());
                    for (int row = 0; row < n; ++row) {
                        const std::vector<float> alone_x(x.begin() + int64_t{row} * k, x.begin() + int64_t{row + 1} * k);
                        const std::vector<float> alone = run_matmul_q(kernels, alone_x, *r, 1, &groups.matrix());
                        INFO("q" << groups.matrix().bits << " n " << n << " threads " << threads << " row " << row);
                        CHECK(std::equal(alone.begin(), alone.end(), all.begin() + int64_t{row} * m));
                    }
                }
            }
        }
    });
}

// A quantized part beside fp32 and fp16 ones in one matmuls call gets its own matmul_q's bits.
TEST_CASE("matmuls gives a quantized part the bits of its own matmul_q", "[matmul_q]") {
    for_each_level([](const KernelTable& kernels) {
        for (int n : {1, 4})
            for (int threads : {1, 2}) {
                const ThreadCount scope(threads);
                const int k = 576;
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, 77);
                const RandomQuant q4(192, k, 4, 32, QuantOffset::none, true, 78);
                const RandomQuant q8(13, k, 8, 32, QuantOffset::none, false, 79);
                // 61 rows in row groups, after 13: the threads' shares cut its groups.
                const RandomQuant grouped(61, k, 4, 32, QuantOffset::none, false, 81);
                const QuantRowGroups groups(grouped.w, grouped.m);
                const std::vector<float> w32 = random_floats(size_t{64} * k, 80);
                std::vector<float> out_q4 = nan_filled(size_t(n) * 192), out_q8 = nan_filled(size_t(n) * 13),
                                   out_f32 = nan_filled(size_t(n) * 64), out_grouped = nan_filled(size_t(n) * 61);
                const MatmulPart parts[4] = {{.out = out_q4.data(), .w_q = &q4.w, .m = 192},
                                             {.out = out_f32.data(), .w_f32 = w32.data(), .m = 64},
                                             {.out = out_q8.data(), .w_q = &q8.w, .m = 13},
                                             {.out = out_grouped.data(), .w_q = &groups.matrix(), .m = 61}};
                kernels.matmuls(parts, 4, x.data(), n, k);
                CHECK(out_q4 == run_matmul_q(kernels, x, q4, n));
                CHECK(out_q8 == run_matmul_q(kernels, x, q8, n));
                CHECK(out_grouped == run_matmul_q(kernels, x, grouped, n, &groups.matrix()));
                std::vector<float> alone = nan_filled(size_t(n) * 64);
                kernels.matmul(alone.data(), x.data(), w32.data(), n, k, 64);
                CHECK(out_f32 == alone);
            }
    });
}

}  // namespace
