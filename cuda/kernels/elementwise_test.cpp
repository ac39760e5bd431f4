// cuda/kernels/elementwise.cu beyond the kernel contract's ops, which the kernel ops harness checks against the
// reference (tests/kernel_ops/): the fused residual norms, the rope tables, the embedding lookup, gather_rows and
// the f32_to_f16 rounding against the host code the CPU backend runs; the activations' far tails element by
// element; the launches' argument checks.
//
// Every kernel runs on its vectorised path (sizes divisible by 4, aligned pointers) and on its scalar path
// (odd sizes, or pointers one float past an aligned address), on outputs poisoned with NaN. Copies, adds and
// roundings are compared bit for bit; the rest with ||cuda - ref|| / ||ref|| <= 1e-5.
#include <catch2/catch.hpp>

#include <bit>
#include <random>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/test_buffers.h"
#include "cuda/kernels/test_support.h"
#include "kernels/error.h"
#include "kernels/f16.h"
#include "kernels/kernels.h"

namespace {

using namespace kvx::cuda::test;
using kvx::cuda::DeviceBuffer;

const kvx::KernelTable& reference = kvx::reference_kernels();

// The scalar paths are reached either by a size that is not a multiple of 4 or by this offset: device
// buffers start 256-byte aligned, so one float in is 4-byte aligned only.
constexpr size_t kMisaligned = 1;

struct NormShape {
    int n, d;
    size_t offset;  // elements before x, y and out: kMisaligned forces the scalar path
};

const NormShape kNormShapes[] = {
    {1, 1, 0},  {3, 3, 0},     {2, 8, 0},    {5, 48, 0},   {4, 100, 0},  {3, 576, 0}, {2, 576, kMisaligned},
    {1, 1536, 0}, {2, 4100, 0}, {1, 8192, 0}, {7, 64, kMisaligned}, {1, 5000, kMisaligned},
};

// Rows around `center`, so that LayerNorm's mean matters.
std::vector<float> rows_around(float center, size_t count, uint32_t seed) {
    std::vector<float> v = random_floats(count, seed);
    for (float& x : v) x += center;
    return v;
}

TEST_CASE("add_rmsnorm and add_layernorm leave x + y in x bit for bit and normalise it") {
    for (const NormShape& s : kNormShapes) {
        for (bool layer : {false, true}) {
            INFO("n " << s.n << " d " << s.d << " offset " << s.offset << (layer ? " add_layernorm" : " add_rmsnorm"));
            const size_t count = static_cast<size_t>(s.n) * static_cast<size_t>(s.d);
            const std::vector<float> x = rows_around(layer ? 1.0f : 0.0f, count, 4);
            const std::vector<float> y = random_floats(count, 5);
            const std::vector<float> weight = random_floats(static_cast<size_t>(s.d), 6, 0.5f, 1.5f);
            const std::vector<float> bias = random_floats(static_cast<size_t>(s.d), 7);
            std::vector<float> want_x = x;
            reference.add(want_x.data(), y.data(), static_cast<int64_t>(count));
            std::vector<float> want(count);
            if (layer)
                reference.layernorm(want.data(), want_x.data(), weight.data(), bias.data(), s.n, s.d, 1e-5f);
            else
                reference.rmsnorm(want.data(), want_x.data(), weight.data(), s.n, s.d, 1e-6f);

            OffsetBuffer<float> dx(x, s.offset), dy(y, s.offset), dweight(weight, s.offset), dbias(bias, s.offset);
            OffsetBuffer<float> dout(count, s.offset);
            if (layer)
                kvx::cuda::add_layernorm(dout.data(), dx.data(), dy.data(), dweight.data(), dbias.data(), s.n, s.d, 1e-5f,
                                         nullptr);
            else
                kvx::cuda::add_rmsnorm(dout.data(), dx.data(), dy.data(), dweight.data(), s.n, s.d, 1e-6f, nullptr);
            CHECK(count_bit_differences(dx.host(), want_x) == 0);
            CHECK(relative_error(dout.host(), want) <= kFp32Tolerance);
        }
    }
}

TEST_CASE("rope_tables compute the host's fp32 angle and its cos and sin") {
    const std::vector<int32_t> positions = {0, 1, 2, 17, 255, 4095, 32767, 100000, 3};
    for (int half : {1, 3, 4, 32, 50, 64}) {
        INFO("half " << half);
        const int n_rows = static_cast<int>(positions.size());
        std::vector<float> inv_freq(static_cast<size_t>(half));
        for (int i = 0; i < half; ++i)
            inv_freq[static_cast<size_t>(i)] = std::pow(10000.0f, -static_cast<float>(2 * i) / static_cast<float>(2 * half));
        std::vector<float> want_cos, want_sin;
        for (int32_t pos : positions)
            for (float f : inv_freq) {
                const float angle = static_cast<float>(pos) * f;  // as cpu/backend/cpu_backend.cpp computes it
                want_cos.push_back(std::cos(angle));
                want_sin.push_back(std::sin(angle));
            }
        const size_t count = want_cos.size();
        auto d_pos = to_device(positions);
        auto d_inv = to_device(inv_freq);
        auto d_cos = poisoned<float>(count), d_sin = poisoned<float>(count);
        kvx::cuda::rope_tables(d_cos.data(), d_sin.data(), d_pos.data(), d_inv.data(), n_rows, half, nullptr);
        CHECK(relative_error(to_host(d_cos), want_cos) <= kFp32Tolerance);
        CHECK(relative_error(to_host(d_sin), want_sin) <= kFp32Tolerance);
    }
}

TEST_CASE("the far negative tails of gelu_erf and gelu_tanh keep the reference's small outputs") {
    SECTION("gelu_erf keeps the reference's small negative outputs") {
        // 1 + erff(x / sqrt 2) cancels below x of about -4; the erfc form keeps these outputs to a few ulps.
        std::vector<float> x;
        for (float v = -7.0f; v <= -2.0f; v += 0.125f) x.push_back(v);
        std::vector<float> want(x.size());
        reference.gelu_erf(want.data(), x.data(), static_cast<int64_t>(x.size()));
        auto dx = to_device(x);
        auto dout = poisoned<float>(x.size());
        kvx::cuda::gelu_erf(dout.data(), dx.data(), static_cast<int64_t>(x.size()), nullptr);
        const std::vector<float> got = to_host(dout);
        for (size_t i = 0; i < x.size(); ++i) {
            INFO("x " << x[i] << " got " << got[i] << " want " << want[i]);
            CHECK(want[i] < 0.0f);
            CHECK(std::abs(got[i] - want[i]) <= 1e-5 * std::abs(want[i]));
        }
    }
    SECTION("gelu_tanh keeps the reference's tiny negative outputs far below zero") {
        // 1 + tanhf(v) loses its digits below x of about -3 and cancels to 0 below about -5; the reference keeps
        // these outputs (down to about -1e-28 at x = -9). Their relative error grows with |v| (v's rounding, amplified by exp(-2|v|)),
        // hence 1e-4 here.
        std::vector<float> x;
        for (float v = -9.0f; v <= -3.0f; v += 0.125f) x.push_back(v);
        std::vector<float> want(x.size());
        reference.gelu_tanh(want.data(), x.data(), static_cast<int64_t>(x.size()));
        auto dx = to_device(x);
        auto dout = poisoned<float>(x.size());
        kvx::cuda::gelu_tanh(dout.data(), dx.data(), static_cast<int64_t>(x.size()), nullptr);
        const std::vector<float> got = to_host(dout);
        for (size_t i = 0; i < x.size(); ++i) {
            INFO("x " << x[i] << " got " << got[i] << " want " << want[i]);
            CHECK(want[i] < 0.0f);
            CHECK(std::abs(got[i] - want[i]) <= 1e-4 * std::abs(want[i]));
        }
    }
}

TEST_CASE("embed, gather_rows and f32_to_f16 copy and round bit for bit") {
    SECTION("embed copies fp32 and fp16 rows, adding GPT-2's position rows, bit for bit") {
        const int vocab = 37, max_pos = 23;
        const std::vector<int32_t> tokens = {5, 0, 36, 5, 17, 2, 30};
        const std::vector<int32_t> positions = {0, 1, 2, 22, 3, 4, 11};
        const int n_rows = static_cast<int>(tokens.size());
        for (int dim : {8, 6, 48, 100, 1}) {
            for (bool table_f16 : {false, true}) {
                // pos_kind: no position table, fp32, fp16; scale 1 (none) or Gemma's sqrt(dim) as a config's fp32 value
                const float gemma = std::sqrt(48.0f);
                for (auto [pos_kind, scale] : {std::pair{0, 1.0f}, {1, 1.0f}, {2, 1.0f}, {0, gemma}, {2, gemma}}) {
                    INFO("dim " << dim << (table_f16 ? " fp16 table" : " fp32 table") << " positions " << pos_kind
                                << " scale " << scale);
                    const size_t udim = static_cast<size_t>(dim);
                    const std::vector<float> table = random_floats(static_cast<size_t>(vocab) * udim, 17);
                    const std::vector<float> pos_table = random_floats(static_cast<size_t>(max_pos) * udim, 18);
                    const std::vector<uint16_t> table_h = to_f16(table), pos_h = to_f16(pos_table);
                    std::vector<float> want(static_cast<size_t>(n_rows) * udim);
                    for (size_t r = 0; r < tokens.size(); ++r)
                        for (size_t j = 0; j < udim; ++j) {
                            const size_t t = static_cast<size_t>(tokens[r]) * udim + j;
                            const size_t p = static_cast<size_t>(positions[r]) * udim + j;
                            float v = table_f16 ? kvx::f16_to_f32(table_h[t]) : table[t];
                            if (scale != 1.0f) v *= scale;  // cpu_backend.cpp's embed: the row, then the scale
                            if (pos_kind == 1) v += pos_table[p];
                            if (pos_kind == 2) v += kvx::f16_to_f32(pos_h[p]);
                            want[r * udim + j] = v;
                        }
                    auto d_table = to_device(table);
                    auto d_table_h = to_device(table_h);
                    auto d_pos = to_device(pos_table);
                    auto d_pos_h = to_device(pos_h);
                    auto d_tokens = to_device(tokens), d_positions = to_device(positions);
                    auto dx = poisoned<float>(want.size());
                    const void* table_ptr = table_f16 ? static_cast<const void*>(d_table_h.data()) : d_table.data();
                    const void* pos_ptr = pos_kind == 0 ? nullptr
                                          : pos_kind == 1 ? static_cast<const void*>(d_pos.data())
                                                          : static_cast<const void*>(d_pos_h.data());
                    kvx::cuda::embed(dx.data(), d_tokens.data(), table_ptr, table_f16, scale, pos_ptr, pos_kind == 2,
                                     pos_kind == 0 ? nullptr : d_positions.data(), n_rows, dim, nullptr);
                    CHECK(count_bit_differences(to_host(dx), want) == 0);
                }
            }
        }
    }
    SECTION("gather_rows copies the chosen rows bit for bit") {
        const std::vector<int32_t> rows = {4, 0, 4, 9, 2};
        for (int d : {1, 3, 8, 576, 101}) {
            for (size_t offset : {size_t{0}, kMisaligned}) {
                INFO("d " << d << " offset " << offset);
                const size_t ud = static_cast<size_t>(d);
                const std::vector<float> x = random_floats(10 * ud, 19);
                std::vector<float> want;
                for (int32_t r : rows) want.insert(want.end(), x.begin() + r * d, x.begin() + (r + 1) * d);
                OffsetBuffer<float> dx(x, offset);
                OffsetBuffer<float> dout(want.size(), offset);
                auto d_rows = to_device(rows);
                kvx::cuda::gather_rows(dout.data(), dx.data(), d_rows.data(), static_cast<int>(rows.size()), d, nullptr);
                CHECK(count_bit_differences(dout.host(), want) == 0);
            }
        }
    }
    SECTION("f32_to_f16 rounds as kernels/f16.h does, bit for bit, specials included") {
        std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e6f, 1e-8f, -3e-8f,
                                5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 6.097e-5f, 1e-40f,
                                std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                                std::bit_cast<float>(0x7f800001u), 1.00048828125f, 1.00146484375f, 2049.0f, 2051.0f};
        // Every rounding case: random bit patterns over the whole float range, and values near fp16's range.
        std::mt19937 rng(20);
        for (int i = 0; i < 3000; ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
        const std::vector<float> moderate = random_floats(3001, 21, -70000.0f, 70000.0f);
        x.insert(x.end(), moderate.begin(), moderate.end());
        const std::vector<float> tiny = random_floats(1001, 22, -1e-4f, 1e-4f);
        x.insert(x.end(), tiny.begin(), tiny.end());
        for (size_t offset : {size_t{0}, kMisaligned}) {
            for (size_t n : {x.size(), size_t{3}}) {
                INFO("n " << n << " offset " << offset);
                const std::vector<float> input(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
                OffsetBuffer<float> dx(input, offset);
                auto dout = poisoned<uint16_t>(n);
                kvx::cuda::f32_to_f16(dout.data(), dx.data(), static_cast<int64_t>(n), nullptr);
                const std::vector<uint16_t> got = to_host(dout);
                size_t mismatches = 0;
                for (size_t i = 0; i < n; ++i)
                    if (got[i] != kvx::f32_to_f16(input[i])) {
                        if (mismatches++ < 5)
                            UNSCOPED_INFO("x " << input[i] << " (0x" << std::hex << std::bit_cast<uint32_t>(input[i]) << ") got 0x"
                                               << got[i] << " want 0x" << kvx::f32_to_f16(input[i]) << std::dec);
                    }
                CHECK(mismatches == 0);
            }
        }
    }
    SECTION("elementwise launches reject bad sizes and parameters with kvx::Error") {
        CHECK_THROWS_AS(kvx::cuda::rmsnorm(nullptr, nullptr, nullptr, -1, 8, 1e-5f, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::add(nullptr, nullptr, -4, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::embed(nullptr, nullptr, nullptr, false, 1.0f, nullptr, false, nullptr, 2, -1, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::rope(nullptr, nullptr, nullptr, 1, 1, 8, 10, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::rope(nullptr, nullptr, nullptr, 1, 1, 8, -2, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::softcap(nullptr, 4, 0.0f, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::clamp(nullptr, 4, 0.0f, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::scale(nullptr, -4, 2.0f, nullptr), kvx::Error);
    }
}

}  // namespace
