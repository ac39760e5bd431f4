// A weight matrix stored as blocks of 8- or 4-bit integers (docs/model-format.md, "Quantized matrices").
//
// Row r of a [rows][cols] matrix is padded to padded_cols (cols rounded up to a multiple of max(block, 32))
// and cut into n_blocks = padded_cols / block blocks along the input dimension. Element j, in block
// i = j / block, is
//
//   w[r][j] = scale[r][i] * (q[r][j] - zero[r][i])   offset none (zero = 8 for q4, 0 for q8) or zero_points
//   w[r][j] = scale[r][i] * q[r][j] + min[r][i]      offset mins (GGUF Q4_1)
//
// Storage of q, row after row (row_bytes = padded_cols * bits / 8 bytes each):
//   q8: int8, element j at byte j.
//   q4: unsigned nibbles 0..15 in groups of 32 elements (16 bytes); byte t of group g holds element 32g + t
//       in its low nibble and element 32g + t + 16 in its high nibble, so one mask and one shift unpack a
//       group into 32 bytes in element order.
//
// Layout row_groups (q4 in blocks of 32, q8 in blocks of 16 or 32; offset none or mins;
// kernels/quant_row_groups.h makes it from rows):
// eight rows side by side, so that a SIMD register holds the same four bytes of eight rows and a whole
// block's integer dot product stays in one lane per row, with no horizontal sum. For row group G (rows
// 8G .. 8G + 7, the last one padded with rows of zero weight) and block i:
//   q4:     [row_groups][n_blocks][4 chunks][8 rows][4 bytes]: byte b < 16 of row 8G + l's q4 block (as above)
//           at chunk b / 4, offset 4 l + b % 4
//   q8:     [row_groups][n_blocks][block / 4 chunks][8 rows][4 bytes]: element b of row 8G + l's block at chunk b / 4,
//           offset 4 l + b % 4, stored as q + 128 (offset binary: unsigned, with the zero at 128, as the
//           unsigned operand of the byte multiplies wants it)
//   scales: [row_groups][n_blocks][8 rows], and the minimums (offset mins) the same
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/f16.h"

namespace kvx {

enum class QuantOffset : int32_t {
    none,         // symmetric: the fixed zero of the format (8 for q4, 0 for q8)
    zero_points,  // an integer zero per block: int8 for q8, uint8 (0..15) for q4
    mins,         // a float minimum per block, of the scales' type
};

// How the SIMD kernels round x to int8 for a matrix (kernels.h, matmul_q): as the engine the weights came from
// does, so that kvx's results can be checked against it, near ties included.
enum class QuantXRounding : int32_t {
    onnxruntime,  // per 32: scale = amax / 127 in fp32, q = round(x / scale): ORT's accuracy_level 4 (MLAS)
    ggml,         // per 32: q = round(x * (127 / amax)), scale = amax / 127 rounded to fp16: llama.cpp's Q8_0
    // per 256: with m the first element of largest |x|, q = min(127, round(x * (-127 / m))), scale = 1 / (-127 / m)
    // in fp32 (negative for m > 0): llama.cpp's Q8_K, what its K-quant and IQ4_XS dot products take
    ggml_k,
};

enum class QuantLayout : int32_t {
    rows,        // row after row, as stored in the model directory
    row_groups,  // eight rows interleaved, as above: what the SIMD kernels read fastest
};

struct QuantMatrix {
    const uint8_t* q = nullptr;      // [rows][row_bytes], as above
    const void* scales = nullptr;    // [rows][n_blocks]: fp32, or fp16 bits when scales_f16
    const void* offsets = nullptr;   // [rows][n_blocks] as `offset` says; null for none
    int32_t bits = 4;                // 4 or 8
    int32_t block = 32;              // a power of two, 16..256
    int32_t padded_cols = 0;         // cols rounded up to a multiple of max(block, 32)
    QuantOffset offset = QuantOffset::none;
    bool scales_f16 = false;
    QuantLayout layout = QuantLayout::rows;
    QuantXRounding x_rounding = QuantXRounding::onnxruntime;  // the SIMD kernels' rounding of x for this matrix
};

constexpr int kQuantGroupRows = 8;  // rows in a row group

// Where block i of row r's scale (and zero point or minimum) is in the tables.
inline int64_t quant_block_index(const QuantMatrix& w, int64_t r, int64_t i) {
    const int64_t n_blocks = w.padded_cols / w.block;
    if (w.layout == QuantLayout::row_groups)
        return ((r / kQuantGroupRows) * n_blocks + i) * kQuantGroupRows + r % kQuantGroupRows;
    return r * n_blocks + i;
}

// The padded row length of a [.][cols] matrix in blocks of `block`.
inline int64_t quant_padded_cols(int64_t cols, int32_t block) {
    const int64_t unit = block > 32 ? block : 32;
    return (cols + unit - 1) / unit * unit;
}

// The bytes of the tables of a [rows][.] matrix w in the rows layout: q [rows][row_bytes], scales and offsets
// [rows][n_blocks] (offsets: 1-byte zero points, minimums of the scales' type, or none). What a backend
// copies or uploads, and what a benchmark reads per call.
struct QuantTableBytes {
    size_t q = 0, scales = 0, offsets = 0;
    size_t total() const { return q + scales + offsets; }
};

inline QuantTableBytes quant_table_bytes(const QuantMatrix& w, int64_t rows) {
    const auto n_rows = static_cast<size_t>(rows);
    const auto entries = n_rows * static_cast<size_t>(w.padded_cols / w.block);
    const size_t float_bytes = w.scales_f16 ? 2 : 4;
    const size_t offset_bytes = w.offset == QuantOffset::none          ? 0
                                : w.offset == QuantOffset::zero_points ? 1
                                                                       : float_bytes;
    return {n_rows * static_cast<size_t>(w.padded_cols) * static_cast<size_t>(w.bits) / 8, entries * float_bytes,
            entries * offset_bytes};
}

// Element j of row r's integers, 0..15 for q4, -128..127 for q8.
inline int32_t quant_value(const QuantMatrix& w, int64_t r, int64_t j) {
    if (w.layout == QuantLayout::row_groups && w.bits == 8) {
        const int64_t block = (r / kQuantGroupRows) * (w.padded_cols / w.block) + j / w.block;
        const int64_t b = j % w.block;
        return w.q[block * w.block * kQuantGroupRows + b / 4 * 32 + r % kQuantGroupRows * 4 + b % 4] - 128;
    }
    if (w.layout == QuantLayout::row_groups) {
        const int64_t block = (r / kQuantGroupRows) * (w.padded_cols / 32) + j / 32;
        const int64_t b = j % 16;
        const uint8_t byte = w.q[block * 128 + b / 4 * 32 + r % kQuantGroupRows * 4 + b % 4];
        return j % 32 < 16 ? byte & 0x0f : byte >> 4;
    }
    const int64_t row_bytes = int64_t{w.padded_cols} * w.bits / 8;
    const uint8_t* row = w.q + r * row_bytes;
    if (w.bits == 8) return static_cast<int8_t>(row[j]);
    const uint8_t byte = row[j / 32 * 16 + j % 16];
    return j % 32 < 16 ? byte & 0x0f : byte >> 4;
}

// Block i of row r's scale, zero point or minimum, as fp32 (fp16 ones widen exactly).
inline float quant_block_float(const void* table, bool f16, int64_t index) {
    return f16 ? f16_to_f32(static_cast<const uint16_t*>(table)[index]) : static_cast<const float*>(table)[index];
}

// Row r of w as fp32 into out[cols]: the reference dequantization (an embedding lookup; the reference
// matmul). Each weight is s * (q - z) or s * q + m computed in fp32, as ONNX Runtime's and llama.cpp's
// dequantization compute it.
inline void dequantize_row(const QuantMatrix& w, int64_t r, int64_t cols, float* out) {
    for (int64_t j = 0; j < cols; ++j) {
        const int64_t b = quant_block_index(w, r, j / w.block);
        const float s = quant_block_float(w.scales, w.scales_f16, b);
        const int32_t q = quant_value(w, r, j);
        switch (w.offset) {
            case QuantOffset::none:
                out[j] = s * static_cast<float>(q - (w.bits == 4 ? 8 : 0));
                break;
            case QuantOffset::zero_points: {
                const int32_t z = w.bits == 4 ? static_cast<const uint8_t*>(w.offsets)[b]
                                              : static_cast<const int8_t*>(w.offsets)[b];
                out[j] = s * static_cast<float>(q - z);
                break;
            }
            case QuantOffset::mins:
                out[j] = s * static_cast<float>(q) + quant_block_float(w.offsets, w.scales_f16, b);
                break;
        }
    }
}

}  // namespace kvx
