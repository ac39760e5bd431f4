// Random inputs for the kernel tests of both backends (cpu/kernels/test_support.h and
// cuda/kernels/test_support.h take them from here). Header-only; test code only.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/f16.h"
#include "kernels/quant_matrix.h"

namespace kvx::testing {

// n floats uniform in [lo, hi); the same seed gives the same floats.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// A random quantized [m][k] matrix, its integers kept in element order so that the harness decodes the
// weights from the documented format itself (docs/model-format.md), not through dequantize_row. The row
// padding holds random integers too: a kernel that reads padding as weights fails.
struct RandomQuant {
    std::vector<uint8_t> q;          // [m][row_bytes]
    std::vector<float> scales32;     // [m][n_blocks]
    std::vector<uint16_t> scales16;  // [m][n_blocks]
    std::vector<uint8_t> zeros;      // [m][n_blocks] uint8 (q4) / int8 (q8) zero points
    std::vector<float> mins32;       // [m][n_blocks]
    std::vector<uint16_t> mins16;    // [m][n_blocks]
    // QuantScales::i8_of_f16: [m][n_blocks] multipliers of the scales and the minimums, [m][n_bases] fp16 bases
    std::vector<int8_t> scales8, mins8;
    std::vector<uint16_t> scale_bases, min_bases;
    std::vector<int32_t> values;     // [m][padded_cols], the integers
    QuantMatrix w;
    int m = 0, k = 0;

    RandomQuant(int rows, int cols, int bits, int block, QuantOffset offset, bool f16, uint32_t seed)
        : RandomQuant(rows, cols, bits, block, offset, f16 ? QuantScales::f16 : QuantScales::f32, seed) {}
    // six_bit_values: q8 integers in -32..31 only (QuantMatrix::six_bit_values), as GGUF's Q6_K's.
    RandomQuant(int rows, int cols, int bits, int block, QuantOffset offset, QuantScales scale_type, uint32_t seed,
                bool six_bit_values = false)
        : m(rows), k(cols) {
        std::mt19937 rng(seed);
        const int64_t padded = quant_padded_cols(k, block);
        const int64_t n_blocks = padded / block;
        const int64_t row_bytes = padded * bits / 8;
        q.assign(static_cast<size_t>(m * row_bytes), 0);
        values.assign(static_cast<size_t>(m * padded), 0);
        std::uniform_int_distribution<int> value(bits == 4 ? 0 : six_bit_values ? -32 : -128,
                                                 bits == 4 ? 15 : six_bit_values ? 31 : 127);
        for (int64_t row = 0; row < m; ++row)
            for (int64_t j = 0; j < padded; ++j) {
                const int v = value(rng);
                values[static_cast<size_t>(row * padded + j)] = v;
                uint8_t& byte = q[static_cast<size_t>(row * row_bytes + (bits == 8 ? j : j / 32 * 16 + j % 16))];
                if (bits == 8)
                    byte = static_cast<uint8_t>(static_cast<int8_t>(v));
                else
                    byte = static_cast<uint8_t>(j % 32 < 16 ? (byte & 0xf0) | v : (byte & 0x0f) | (v << 4));
            }
        const size_t blocks = static_cast<size_t>(m * n_blocks);
        const std::vector<float> s = random_floats(blocks, seed + 1, -0.02f, 0.02f);
        const std::vector<float> mins = random_floats(blocks, seed + 2, -0.2f, 0.2f);
        for (size_t b = 0; b < blocks; ++b) {
            scales32.push_back(s[b]);
            scales16.push_back(f32_to_f16(s[b]));
            mins32.push_back(mins[b]);
            mins16.push_back(f32_to_f16(mins[b]));
            zeros.push_back(static_cast<uint8_t>(bits == 4 ? value(rng) : static_cast<int8_t>(value(rng))));
        }
        // Multipliers over all of int8, and bases that give the scales and minimums the ranges above.
        std::uniform_int_distribution<int> multiplier(-128, 127);
        for (size_t b = 0; b < blocks; ++b) {
            scales8.push_back(static_cast<int8_t>(multiplier(rng)));
            mins8.push_back(static_cast<int8_t>(multiplier(rng)));
        }
        w.padded_cols = static_cast<int32_t>(padded);
        const auto n_bases = static_cast<size_t>(m * quant_base_count(w));
        for (float base : random_floats(n_bases, seed + 3, -0.02f / 128, 0.02f / 128)) scale_bases.push_back(f32_to_f16(base));
        for (float base : random_floats(n_bases, seed + 4, -0.2f / 128, 0.2f / 128)) min_bases.push_back(f32_to_f16(base));
        w.q = q.data();
        w.bits = bits;
        w.block = block;
        w.scale_type = scale_type;
        w.six_bit_values = six_bit_values;
        w.offset = offset;
        const bool i8 = scale_type == QuantScales::i8_of_f16;
        const void* scale_table = i8 ? static_cast<const void*>(scales8.data())
                                  : scale_type == QuantScales::f16 ? static_cast<const void*>(scales16.data()) : scales32.data();
        const void* min_table = i8 ? static_cast<const void*>(mins8.data())
                                : scale_type == QuantScales::f16 ? static_cast<const void*>(mins16.data()) : mins32.data();
        w.scales = scale_table;
        if (offset == QuantOffset::zero_points) w.offsets = zeros.data();
        if (offset == QuantOffset::mins) w.offsets = min_table;
        if (i8) {
            w.scale_bases = scale_bases.data();
            if (offset == QuantOffset::mins) w.min_bases = min_bases.data();
        }
    }
    RandomQuant(const RandomQuant&) = delete;
    RandomQuant& operator=(const RandomQuant&) = delete;

    // Weight (row, j) from the integers and the tables, as docs/model-format.md defines it.
    double weight(int64_t row, int64_t j) const {
        const int64_t b = row * (w.padded_cols / w.block) + j / w.block;
        const auto bi = static_cast<size_t>(b);
        const auto base = static_cast<size_t>(row * quant_base_count(w) + j / kQuantSuperBlock);
        auto entry = [&](const std::vector<float>& f32, const std::vector<uint16_t>& f16, const std::vector<int8_t>& i8,
                         const std::vector<uint16_t>& bases) {
            switch (w.scale_type) {
                case QuantScales::f32: return f32[bi];
                case QuantScales::f16: return f16_to_f32(f16[bi]);
                case QuantScales::i8_of_f16: break;
            }
            return f16_to_f32(bases[base]) * static_cast<float>(i8[bi]);
        };
        const float s = entry(scales32, scales16, scales8, scale_bases);
        const int32_t v = values[static_cast<size_t>(row * w.padded_cols + j)];
        switch (w.offset) {
            case QuantOffset::none: return s * static_cast<float>(v - (w.bits == 4 ? 8 : 0));
            case QuantOffset::zero_points: {
                const int32_t z = w.bits == 4 ? zeros[bi] : static_cast<int8_t>(zeros[bi]);
                return s * static_cast<float>(v - z);
            }
            case QuantOffset::mins: return s * static_cast<float>(v) + entry(mins32, mins16, mins8, min_bases);
        }
        return 0.0;
    }
};

}  // namespace kvx::testing
