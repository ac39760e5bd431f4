// The quantized matmul (matmul_q, and quantized parts of matmuls) on every SIMD level, and the reference's
// reading of the format.
//
// Three references, from the closest to the most independent:
//   - x rounded to int8 by this test as the SIMD kernels say they round it (kernels.h), times the weights
//     dequantized by this test from the documented layout, summed in double: the kernels must agree to
//     fp32 rounding, which a wrong nibble, scale, zero point or block boundary would far exceed;
//   - the reference kernel (exact fp32 x), within the error bound that rounding x to int8 allows;
//   - the reference kernel itself against this test's decoding of the layout.
// Matrices that fit row groups (q4, block 32, zero 8) run again copied into them (kernels/quant_row_groups.h),
// against the same references; there every level must also give the same bits (quant_row_groups.inc).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
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
using kvx::QuantRowGroups;
using kvx::QuantXRounding;
using kvx::cpu::testing::for_each_level;
using kvx::cpu::testing::nan_filled;
using kvx::cpu::testing::random_floats;
using kvx::cpu::testing::ThreadCount;

// A random quantized matrix and the storage its QuantMatrix points into.
struct RandomQuant {
    std::vector<uint8_t> q;         // [m][row_bytes]
    std::vector<float> scales32;    // [m][n_blocks], when !f16
    std::vector<uint16_t> scales16; // [m][n_blocks], when f16
    std::vector<uint8_t> zeros;     // [m][n_blocks] int8 / uint8 zero points
    std::vector<float> mins32;      // [m][n_blocks]
    std::vector<uint16_t> mins16;
    std::vector<int32_t> values;    // [m][padded_cols]: the integers in element order, for the test's decoding
    QuantMatrix w;
    int m = 0, k = 0;
};

struct QuantShape {
    int bits = 4;
    int block = 32;
    QuantOffset offset = QuantOffset::none;
    bool f16 = false;
};

RandomQuant random_quant(int m, int k, QuantShape shape, uint32_t seed) {
    std::mt19937 rng(seed);
    RandomQuant r;
    r.m = m;
    r.k = k;
    const int64_t padded = kvx::quant_padded_cols(k, shape.block);
    const int64_t n_blocks = padded / shape.block;
    const int64_t row_bytes = padded * shape.bits / 8;
    r.q.assign(static_cast<size_t>(m * row_bytes), 0);
    r.values.assign(static_cast<size_t>(m * padded), 0);
    std::uniform_int_distribution<int> value(shape.bits == 4 ? 0 : -128, shape.bits == 4 ? 15 : 127);
    for (int64_t row = 0; row < m; ++row)
        for (int64_t j = 0; j < k; ++j) {  // the padding stays 0, as the format says
            const int v = value(rng);
            r.values[static_cast<size_t>(row * padded + j)] = v;
            uint8_t& byte = r.q[static_cast<size_t>(row * row_bytes + (shape.bits == 8 ? j : j / 32 * 16 + j % 16))];
            if (shape.bits == 8)
                byte = static_cast<uint8_t>(static_cast<int8_t>(v));
            else
                byte = static_cast<uint8_t>(j % 32 < 16 ? (byte & 0xf0) | v : (byte & 0x0f) | (v << 4));
        }
    const size_t blocks = static_cast<size_t>(m * n_blocks);
    const std::vector<float> scales = random_floats(blocks, seed + 1, -0.02f, 0.02f);
    const std::vector<float> mins = random_floats(blocks, seed + 2, -0.2f, 0.2f);
    for (size_t b = 0; b < blocks; ++b) {
        r.scales32.push_back(scales[b]);
        r.scales16.push_back(kvx::f32_to_f16(scales[b]));
        r.mins32.push_back(mins[b]);
        r.mins16.push_back(kvx::f32_to_f16(mins[b]));
        r.zeros.push_back(static_cast<uint8_t>(shape.bits == 4 ? value(rng) : static_cast<int8_t>(value(rng))));
    }
    r.w.q = r.q.data();
    r.w.bits = shape.bits;
    r.w.block = shape.block;
    r.w.padded_cols = static_cast<int32_t>(padded);
    r.w.scales_f16 = shape.f16;
    r.w.scales = shape.f16 ? static_cast<const void*>(r.scales16.data()) : r.scales32.data();
    r.w.offset = shape.offset;
    if (shape.offset == QuantOffset::zero_points) r.w.offsets = r.zeros.data();
    if (shape.offset == QuantOffset::mins)
        r.w.offsets = shape.f16 ? static_cast<const void*>(r.mins16.data()) : r.mins32.data();
    return r;
}

// Weight (row, j) decoded from r.values and the tables, as docs/model-format.md defines it.
double test_weight(const RandomQuant& r, int64_t row, int64_t j) {
    const QuantMatrix& w = r.w;
    const int64_t b = row * (w.padded_cols / w.block) + j / w.block;
    const float s = w.scales_f16 ? kvx::f16_to_f32(r.scales16[static_cast<size_t>(b)]) : r.scales32[static_cast<size_t>(b)];
    const int32_t q = r.values[static_cast<size_t>(row * w.padded_cols + j)];
    switch (w.offset) {
        case QuantOffset::none:
            return s * static_cast<float>(q - (w.bits == 4 ? 8 : 0));
        case QuantOffset::zero_points: {
            const int32_t z = w.bits == 4 ? r.zeros[static_cast<size_t>(b)] : static_cast<int8_t>(r.zeros[static_cast<size_t>(b)]);
            return s * static_cast<float>(q - z);
        }
        case QuantOffset::mins: {
            const float m = w.scales_f16 ? kvx::f16_to_f32(r.mins16[static_cast<size_t>(b)]) : r.mins32[static_cast<size_t>(b)];
            return s * static_cast<float>(q) + m;
        }
    }
    return 0.0;
}

// x rounded as the SIMD levels round it: per group of 32, q = rint(x / (amax / 127)), x~ = q * (amax / 127);
// for ggml, q = rint(x * (127 / amax)), x~ = q * fp16(amax / 127).
std::vector<double> rounded_x(const std::vector<float>& x, int n, int k,
                              QuantXRounding x_rounding = QuantXRounding::onnxruntime) {
    std::vector<double> out(x.size());
    for (int i = 0; i < n; ++i)
        for (int g = 0; g * 32 < k; ++g) {
            const float* xs = x.data() + int64_t{i} * k + g * 32;
            const int valid = std::min(32, k - g * 32);
            float amax = 0.0f;
            for (int t = 0; t < valid; ++t) amax = std::max(amax, std::fabs(xs[t]));
            const float scale = amax / 127.0f;
            const bool ggml = x_rounding == QuantXRounding::ggml;
            const double used_scale = ggml ? kvx::f16_to_f32(kvx::f32_to_f16(scale)) : scale;
            for (int t = 0; t < valid; ++t) {
                const float q = ggml ? std::nearbyint(xs[t] * (127.0f / amax)) : std::nearbyint(xs[t] / scale);
                out[static_cast<size_t>(int64_t{i} * k + g * 32 + t)] = amax > 0.0f ? q * used_scale : 0.0;
            }
        }
    return out;
}

// matmul_q of r's matrix, or of w (r's copied into another layout) when given.
std::vector<float> run_matmul_q(const KernelTable& kernels, const std::vector<float>& x, const RandomQuant& r, int n,
                                const QuantMatrix* w = nullptr) {
    std::vector<float> out = nan_filled(static_cast<size_t>(n) * r.m);  // [n][m]
    kernels.matmul_q(out.data(), x.data(), w ? *w : r.w, n, r.k, r.m);
    return out;
}

// max over outputs of |actual - expected| / bound, where bound[i][row] is given.
void check_within(const std::vector<float>& actual, const std::vector<double>& expected, const std::vector<double>& bound) {
    REQUIRE(actual.size() == expected.size());
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
        REQUIRE(std::isfinite(actual[i]));
        const double ratio = std::fabs(actual[i] - expected[i]) / bound[i];
        if (ratio > worst) {
            worst = ratio;
            at = i;
        }
    }
    INFO("worst error " << std::fabs(actual[at] - expected[at]) << " at " << at << ", bound " << bound[at]);
    CHECK(worst <= 1.0);
}

void check_matmul_q(const KernelTable& kernels, int n, int k, int m, QuantShape shape, uint32_t seed,
                    QuantXRounding x_rounding = QuantXRounding::onnxruntime) {
    INFO("matmul_q n=" << n << " k=" << k << " m=" << m << " q" << shape.bits << " block " << shape.block
                       << " offset " << static_cast<int>(shape.offset) << (shape.f16 ? " fp16 scales" : "")
                       << (x_rounding == QuantXRounding::ggml ? " x rounded as ggml" : ""));
    RandomQuant r = random_quant(m, k, shape, seed);
    r.w.x_rounding = x_rounding;
    const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, seed + 7);  // [n][k]
    const std::vector<double> xr = rounded_x(x, n, k, x_rounding);
    const bool rounding_mode_is_ggml = x_rounding == QuantXRounding::ggml;
    std::vector<double> exact(static_cast<size_t>(n) * m), of_rounded(exact.size()), rounding_bound(exact.size()),
        fp32_bound(exact.size());
    for (int i = 0; i < n; ++i)
        for (int row = 0; row < m; ++row) {
            double dot = 0, dot_rounded = 0, abs_sum = 0, rounding = 0;
            for (int j = 0; j < k; ++j) {
                const double w = test_weight(r, row, j);
                const double xv = x[static_cast<size_t>(int64_t{i} * k + j)];
                dot += xv * w;
                dot_rounded += xr[static_cast<size_t>(int64_t{i} * k + j)] * w;
                abs_sum += std::fabs(xv * w);
                float amax = 0.0f;  // of j's group
                for (int t = j / 32 * 32; t < std::min(k, j / 32 * 32 + 32); ++t)
                    amax = std::max(amax, std::fabs(x[static_cast<size_t>(int64_t{i} * k + t)]));
                // half a step of x's grid, and for ggml the fp16 scale's error over up to 127 steps
                const double f16_scale = rounding_mode_is_ggml ? 1.0 / 2048.0 : 0.0;
                rounding += std::fabs(w) * amax * (1.0 / 127.0 / 2.0 + f16_scale);
            }
            const size_t o = static_cast<size_t>(int64_t{i} * m + row);
            exact[o] = dot;
            of_rounded[o] = dot_rounded;
            // fp32 sums over k terms: a few ulps per term of the largest magnitudes, generously.
            fp32_bound[o] = 1e-6 * (abs_sum + 1e-3) * (4 + k / 32.0);
            rounding_bound[o] = rounding * 1.0001 + fp32_bound[o];
        }
    // The reference: exact fp32 x against the documented weights.
    const std::vector<float> reference = run_matmul_q(kvx::reference_kernels(), x, r, n);
    check_within(reference, exact, fp32_bound);
    // The SIMD level: the rounding it documents, and within what that rounding allows of the exact product.
    const std::vector<float> out = run_matmul_q(kernels, x, r, n);
    check_within(out, of_rounded, fp32_bound);
    check_within(out, exact, rounding_bound);
    if (!kvx::row_groups_fit(r.w)) return;
    INFO("in row groups");
    const QuantRowGroups groups(r.w, m);
    CHECK(run_matmul_q(kvx::reference_kernels(), x, r, n, &groups.matrix()) == reference);
    const std::vector<float> grouped = run_matmul_q(kernels, x, r, n, &groups.matrix());
    check_within(grouped, of_rounded, fp32_bound);
    check_within(grouped, exact, rounding_bound);
}

const QuantOffset kOffsets[] = {QuantOffset::none, QuantOffset::zero_points, QuantOffset::mins};

TEST_CASE("matmul_q matches the documented format for every bits, block, offset and scale type", "[matmul_q]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 3000;
        for (int bits : {4, 8})
            for (int block : {16, 32, 64, 128, 256})
                for (QuantOffset offset : kOffsets)
                    for (bool f16 : {false, true})
                        check_matmul_q(kernels, 2, 300, 7, {bits, block, offset, f16}, ++seed);
    });
}

// Matrices from GGUF files round x as llama.cpp does (QuantXRounding::ggml): its Q8_0, Q4_0 and Q4_1 forms.
TEST_CASE("matmul_q rounds x as llama.cpp does for ggml matrices", "[matmul_q]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 4000;
        for (const QuantShape shape : {QuantShape{8, 32, QuantOffset::none, true}, QuantShape{4, 32, QuantOffset::none, true},
                                       QuantShape{4, 32, QuantOffset::mins, true}})
            for (int n : {1, 5})
                for (int k : {32, 100, 576}) check_matmul_q(kernels, n, k, 19, shape, ++seed, QuantXRounding::ggml);
    });
}

TEST_CASE("matmul_q matches at awkward shapes: k not a multiple of 32 or 256, ragged tiles", "[matmul_q]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 4000;
        for (int n : {1, 2, 3, 5})
            for (int k : {1, 15, 16, 17, 33, 100, 576, 1000})
                for (int m : {1, 3, 5, 9}) {
                    const QuantShape shape{seed % 2 ? 4 : 8, (seed % 3 == 0) ? 16 : 32, kOffsets[seed % 3], seed % 4 == 0};
                    check_matmul_q(kernels, n, k, m, shape, ++seed);
                }
    });
}

TEST_CASE("matmul_q at SmolLM2 shapes", "[matmul_q]") {
    for_each_level([](const KernelTable& kernels) {
        check_matmul_q(kernels, 1, 576, 576, {4, 32, QuantOffset::none, true}, 1);       // Q4_0 decode
        check_matmul_q(kernels, 1, 1536, 576, {8, 32, QuantOffset::none, true}, 2);      // Q8_0 down projection
        check_matmul_q(kernels, 7, 576, 1536, {4, 32, QuantOffset::mins, true}, 3);      // Q4_1 prefill
        check_matmul_q(kernels, 3, 576, 200, {4, 128, QuantOffset::zero_points, false}, 4);  // MatMulNBits asym
    });
}

TEST_CASE("row groups hold every integer and scale where the format says", "[matmul_q][row_groups]") {
    for (int m : {1, 7, 8, 9, 20})
        for (int k : {1, 32, 100})
            for (bool f16 : {false, true}) {
                const RandomQuant r = random_quant(m, k, {4, 32, QuantOffset::none, f16}, static_cast<uint32_t>(m * 100 + k));
                const QuantRowGroups groups(r.w, m);
                const QuantMatrix& g = groups.matrix();
                REQUIRE(g.layout == QuantLayout::row_groups);
                std::vector<float> row(static_cast<size_t>(k)), grouped_row(row.size());
                for (int64_t i = 0; i < m; ++i) {
                    for (int64_t j = 0; j < r.w.padded_cols; ++j) REQUIRE(kvx::quant_value(g, i, j) == kvx::quant_value(r.w, i, j));
                    kvx::dequantize_row(r.w, i, k, row.data());
                    kvx::dequantize_row(g, i, k, grouped_row.data());
                    REQUIRE(grouped_row == row);
                }
            }
}

// Row groups: one exact integer per block and the same fp32 steps on every level, so the same bits.
TEST_CASE("matmul_q over row groups gives every level the same bits", "[matmul_q][row_groups]") {
    for (int n : {1, 3, 9})
        for (int k : {33, 576})
            for (bool f16 : {false, true}) {
                const int m = 29;
                const RandomQuant r = random_quant(m, k, {4, 32, QuantOffset::none, f16}, static_cast<uint32_t>(n * 7 + k));
                const QuantRowGroups groups(r.w, m);
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, static_cast<uint32_t>(k));
                std::vector<float> first;
                for_each_level([&](const KernelTable& kernels) {
                    const std::vector<float> out = run_matmul_q(kernels, x, r, n, &groups.matrix());
                    if (first.empty()) first = out;
                    INFO("n=" << n << " k=" << k << (f16 ? " fp16 scales" : ""));
                    CHECK(out == first);
                });
            }
}

// The same bits for a row of x alone (the GEMV) and among others (the GEMM), and on 1 and 2 threads.
TEST_CASE("matmul_q gives a row the same bits whatever the rows beside it and the threads", "[matmul_q][rows][threads]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 5000;
        for (QuantShape shape : {QuantShape{4, 32, QuantOffset::none, true}, QuantShape{8, 16, QuantOffset::zero_points, false},
                                 QuantShape{4, 64, QuantOffset::mins, false}})
            for (int k : {33, 576, 1100}) {
                const int n = 9, m = 131;
                const RandomQuant r = random_quant(m, k, shape, ++seed);
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, ++seed);
                const bool fits = kvx::row_groups_fit(r.w);
                const std::unique_ptr<QuantRowGroups> groups = fits ? std::make_unique<QuantRowGroups>(r.w, m) : nullptr;
                for (const QuantMatrix* w : {&r.w, fits ? &groups->matrix() : nullptr}) {
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
                    INFO("k=" << k << " q" << shape.bits << " block " << shape.block << (w != &r.w ? " row groups" : ""));
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

// A quantized part beside fp32 and fp16 ones in one matmuls call gets its own matmul_q's bits.
TEST_CASE("matmuls gives a quantized part the bits of its own matmul_q", "[matmul_q]") {
    for_each_level([](const KernelTable& kernels) {
        for (int n : {1, 4})
            for (int threads : {1, 2}) {
                const ThreadCount scope(threads);
                const int k = 576;
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, 77);
                const RandomQuant q4 = random_quant(192, k, {4, 32, QuantOffset::none, true}, 78);
                const RandomQuant q8 = random_quant(13, k, {8, 32, QuantOffset::none, false}, 79);
                // 61 rows in row groups, after 13: the threads' shares cut its groups.
                const RandomQuant grouped = random_quant(61, k, {4, 32, QuantOffset::none, false}, 81);
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
