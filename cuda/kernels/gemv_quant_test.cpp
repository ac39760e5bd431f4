// cuda/kernels/gemv_quant.cu and dequantize.cu against the reference: gemv_quant's bias and its scalar paths
// (x or q off 16-byte alignment) against matmul_q then add_bias, its argument checks, and the dequantize kernels
// against dequantize_row (kernels/quant_matrix.h) bit for bit. gemv_quant without a bias, for every form, row
// count and depth, is the kernel ops harness's (tests/kernel_ops/). The dequantize kernels run every form the
// format allows: bits 4 and 8, blocks 16, 32, 128, 256, no offset / zero points / minimums, fp32, fp16 and int8-of-fp16 scales.
//
// The integers are random bytes everywhere, the rows' padding included, so a kernel that reads a padding
// element as a weight, takes a high nibble for a low one or the wrong block's scale fails by far more than the
// tolerance. Tolerance: both sides use the same fp32 weights, so the GEMV differs from the double-precision
// reference only by fp32 summation (1e-5 as gemv_test.cpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/test_buffers.h"
#include "cuda/kernels/test_support.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/quant_matrix.h"

namespace {

using namespace kvx::cuda::test;
using kvx::QuantMatrix;
using kvx::QuantOffset;

const kvx::KernelTable& reference = kvx::reference_kernels();

using kvx::QuantScales;

struct QuantForm {
    int bits;
    int block;
    QuantOffset offset;
    QuantScales scales;
};

const char* scales_name(QuantScales s) {
    return s == QuantScales::f32 ? " fp32" : s == QuantScales::f16 ? " fp16" : " int8 of fp16 bases";
}

// A random [rows][cols] quantized matrix on the host (`host`'s pointers) and on the device (`device`'s), q
// placed q_offset bytes into its allocation (1: unaligned, the scalar paths).
class TestQuantMatrix {
public:
    TestQuantMatrix(const QuantForm& f, int rows, int cols, uint32_t seed, size_t q_offset = 0) {
        std::mt19937 rng(seed);
        auto byte = [&] { return static_cast<uint8_t>(rng() & 0xffu); };
        const int64_t padded = kvx::quant_padded_cols(cols, f.block);
        const auto n_tables = static_cast<size_t>(rows * (padded / f.block));
        q_.resize(static_cast<size_t>(rows * padded * f.bits / 8));
        for (uint8_t& b : q_) b = byte();
        host.bits = f.bits;
        host.block = f.block;
        host.padded_cols = static_cast<int32_t>(padded);
        host.offset = f.offset;
        host.scale_type = f.scales;
        const bool i8 = f.scales == QuantScales::i8_of_f16;
        // int8 multipliers are any byte; their bases keep the scales about as large as the floats'.
        auto entries = [&](size_t n, uint32_t table_seed, float range) {
            if (!i8) return table(random_floats(n, table_seed, -range, range), f.scales == QuantScales::f16);
            std::vector<uint8_t> bytes(n);
            for (uint8_t& b : bytes) b = byte();
            return bytes;
        };
        const auto n_bases = static_cast<size_t>(rows * kvx::quant_base_count(host));
        scales_ = entries(n_tables, seed + 1, 0.05f);
        if (i8) scale_bases_ = to_f16(random_floats(n_bases, seed + 3, -0.05f / 128, 0.05f / 128));
        if (f.offset == QuantOffset::zero_points) {
            offsets_.resize(n_tables);
            for (uint8_t& z : offsets_) z = f.bits == 4 ? byte() & 0x0fu : byte();  // q8: any int8
        } else if (f.offset == QuantOffset::mins) {
            offsets_ = entries(n_tables, seed + 2, 0.2f);
            if (i8) min_bases_ = to_f16(random_floats(n_bases, seed + 4, -0.2f / 128, 0.2f / 128));
        }
        device = host;
        host.q = q_.data();
        host.scales = scales_.data();
        host.offsets = offsets_.empty() ? nullptr : offsets_.data();
        host.scale_bases = scale_bases_.empty() ? nullptr : scale_bases_.data();
        host.min_bases = min_bases_.empty() ? nullptr : min_bases_.data();
        dq_.emplace(q_, q_offset);
        dscales_ = to_device(scales_);
        doffsets_ = to_device(offsets_);
        dscale_bases_ = to_device(scale_bases_);
        dmin_bases_ = to_device(min_bases_);
        device.q = dq_->data();
        device.scales = dscales_.data();
        device.offsets = offsets_.empty() ? nullptr : doffsets_.data();
        device.scale_bases = scale_bases_.empty() ? nullptr : dscale_bases_.data();
        device.min_bases = min_bases_.empty() ? nullptr : dmin_bases_.data();
    }

    QuantMatrix host, device;

private:
    // floats as the bytes of an fp32 or fp16 table
    static std::vector<uint8_t> table(const std::vector<float>& v, bool f16) {
        std::vector<uint8_t> bytes(v.size() * (f16 ? 2 : 4));
        if (f16) {
            const std::vector<uint16_t> h = to_f16(v);
            std::memcpy(bytes.data(), h.data(), bytes.size());
        } else {
            std::memcpy(bytes.data(), v.data(), bytes.size());
        }
        return bytes;
    }

    std::vector<uint8_t> q_, scales_, offsets_;
    std::vector<uint16_t> scale_bases_, min_bases_;  // i8_of_f16
    std::optional<OffsetBuffer<uint8_t>> dq_;
    kvx::cuda::DeviceBuffer<uint8_t> dscales_, doffsets_;
    kvx::cuda::DeviceBuffer<uint16_t> dscale_bases_, dmin_bases_;
};

std::vector<QuantForm> every_form() {
    std::vector<QuantForm> forms;
    for (int bits : {4, 8})
        for (int block : {16, 32, 128, 256})
            for (QuantOffset offset : {QuantOffset::none, QuantOffset::zero_points, QuantOffset::mins})
                for (QuantScales scales : {QuantScales::f32, QuantScales::f16, QuantScales::i8_of_f16})
                    forms.push_back({bits, block, offset, scales});
    return forms;
}

const char* offset_name(QuantOffset o) {
    return o == QuantOffset::none ? "none" : o == QuantOffset::zero_points ? "zero points" : "mins";
}

struct GemvQuantCase {
    int n, k, m;
    bool with_bias;
    size_t x_offset = 0, q_offset = 0;  // elements / bytes: 1 forces the scalar path
};

void check_gemv_quant(const QuantForm& f, const GemvQuantCase& c) {
    INFO("q" << f.bits << " block " << f.block << " offset " << offset_name(f.offset) << scales_name(f.scales)
              << " scales; n " << c.n << " k " << c.k << " m " << c.m << (c.with_bias ? " with bias" : "")
              << " x offset " << c.x_offset << " q offset " << c.q_offset);
    const TestQuantMatrix w(f, c.m, c.k, 7u * static_cast<uint32_t>(c.k + c.m), c.q_offset);
    const std::vector<float> x = random_floats(static_cast<size_t>(c.n) * static_cast<size_t>(c.k), 1);
    const std::vector<float> bias = random_floats(static_cast<size_t>(c.m), 3);
    std::vector<float> want(static_cast<size_t>(c.n) * static_cast<size_t>(c.m));
    reference.matmul_q(want.data(), x.data(), w.host, c.n, c.k, c.m);
    if (c.with_bias) reference.add_bias(want.data(), bias.data(), c.n, c.m);

    OffsetBuffer<float> dx(x, c.x_offset);
    auto dbias = to_device(bias);
    auto out = poisoned<float>(want.size());
    kvx::cuda::gemv_quant(out.data(), dx.data(), w.device, c.with_bias ? dbias.data() : nullptr, c.n, c.k, c.m, nullptr);
    CHECK(relative_error(to_host(out), want) <= kFp32Tolerance);
}

TEST_CASE("gemv_quant adds the bias and reads x and q off alignment as the reference does") {
    SECTION("the scalar path when x or q is not 16-byte aligned at a vector-friendly depth") {
        for (int bits : {4, 8})
            for (QuantOffset offset : {QuantOffset::none, QuantOffset::mins}) {
                for (QuantScales scales : {QuantScales::f32, QuantScales::i8_of_f16}) {
                    check_gemv_quant({bits, 16, offset, scales}, {3, 96, 13, true, 1, 0});
                    check_gemv_quant({bits, 16, offset, scales}, {3, 96, 13, true, 0, 1});
                }
            }
    }
    SECTION("bad arguments throw kvx::Error") {
        const TestQuantMatrix w({4, 32, QuantOffset::none, QuantScales::f32}, 8, 64, 1);
        for (int n : {0, kvx::cuda::kGemvMaxRows + 1})
            CHECK_THROWS_AS(kvx::cuda::gemv_quant(nullptr, nullptr, w.device, nullptr, n, 64, 8, nullptr), kvx::Error);
        QuantMatrix bad = w.device;
        bad.block = 24;
        CHECK_THROWS_AS(kvx::cuda::gemv_quant(nullptr, nullptr, bad, nullptr, 1, 64, 8, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::gemv_quant(nullptr, nullptr, w.device, nullptr, 1, 65, 8, nullptr), kvx::Error);  // padded_cols
        bad = w.device;
        bad.bits = 2;
        CHECK_THROWS_AS(kvx::cuda::dequantize_f16(nullptr, bad, 8, 64, nullptr), kvx::Error);
        bad = w.device;
        bad.scale_type = QuantScales::i8_of_f16;  // without its bases
        CHECK_THROWS_AS(kvx::cuda::gemv_quant(nullptr, nullptr, bad, nullptr, 1, 64, 8, nullptr), kvx::Error);
    }
}

// Row r of the host matrix as dequantize_row gives it.
std::vector<float> reference_row(const QuantMatrix& w, int64_t r, int cols) {
    std::vector<float> row(static_cast<size_t>(cols));
    kvx::dequantize_row(w, r, cols, row.data());
    return row;
}

TEST_CASE("dequantize_f16 and dequantize_rows give dequantize_row's values bit for bit") {
    constexpr int rows = 11;
    for (const QuantForm& f : every_form())
        for (int cols : {33, 520})
            for (size_t q_offset : {size_t{0}, size_t{1}}) {
                if (q_offset == 1 && f.block != 16) continue;  // the unaligned load, once per bits / offset / scales
                INFO("q" << f.bits << " block " << f.block << " offset " << offset_name(f.offset)
                          << scales_name(f.scales) << " scales; cols " << cols << " q offset " << q_offset);
                const TestQuantMatrix w(f, rows, cols, static_cast<uint32_t>(cols), q_offset);
                std::vector<uint16_t> want_f16;
                for (int64_t r = 0; r < rows; ++r)
                    for (float v : reference_row(w.host, r, cols)) want_f16.push_back(kvx::f32_to_f16(v));
                auto out16 = poisoned<uint16_t>(want_f16.size());
                kvx::cuda::dequantize_f16(out16.data(), w.device, rows, cols, nullptr);
                CHECK(count_bit_differences(to_host(out16), want_f16) == 0);

                // Rows 9, 0, 9, 4 (a repeat, as tokens repeat), times a scale, then another lookup added.
                const std::vector<int32_t> indices = {9, 0, 9, 4}, added = {1, 10, 2, 3};
                const float scale = 1.5f;
                std::vector<float> want;
                for (size_t i = 0; i < indices.size(); ++i) {
                    const std::vector<float> a = reference_row(w.host, indices[i], cols);
                    const std::vector<float> b = reference_row(w.host, added[i], cols);
                    for (int j = 0; j < cols; ++j) want.push_back(a[static_cast<size_t>(j)] * scale + b[static_cast<size_t>(j)]);
                }
                auto out = poisoned<float>(want.size());
                auto dindices = to_device(indices);
                auto dadded = to_device(added);
                const int n = static_cast<int>(indices.size());
                kvx::cuda::dequantize_rows(out.data(), dindices.data(), w.device, n, cols, scale, false, nullptr);
                kvx::cuda::dequantize_rows(out.data(), dadded.data(), w.device, n, cols, 1.0f, true, nullptr);
                CHECK(count_bit_differences(to_host(out), want) == 0);
            }
}

}  // namespace
