// A weight matrix stored as blocks of 8-, 6- or 4-bit integers (docs/model-format.md, "Quantized matrices").
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
//   q6:     (bits 6: a q8 matrix in blocks of 16 whose integers all lie in -32..31, GGUF's Q6_K, in row groups
//           only) [row_groups][n_blocks][3 chunks][8 rows][4 bytes] of v = q + 32 (0..63): byte t of row 8G + l
//           at offset 4 l + t of chunk c < 2 holds the low 4 bits of element 4c + t (low nibble) and of element
//           8 + 4c + t (high nibble); byte t of chunk 2 holds the high 2 bits of element 4k + t at bits 2k, 2k + 1
//           (k = 0..3). 12 bytes per 16 elements of a row, as the file's; the zero, 32, comes off as
//           32 * sum_{j in b} xq[j]
//   scales: [row_groups][n_blocks][8 rows], and the minimums (offset mins) the same
//   bases (QuantScales::i8_of_f16): [row_groups][n_bases][8 rows], for the scales and the minimums
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

// How the tables hold a block's scale (and its minimum, offset mins).
enum class QuantScales : int32_t {
    f32,  // [rows][n_blocks] fp32
    f16,  // [rows][n_blocks] fp16 bits
    // [rows][n_blocks] int8 multipliers of a base per 256 elements of the row (scale_bases, min_bases:
    // [rows][n_bases] fp16 bits, n_bases = ceil(padded_cols / 256), block <= 256): scale = float(base) *
    // float(multiplier), exact in fp32 (11 by 8 significant bits). GGUF's K-quants and IQ4_XS store d * sc so (engine/model/gguf_matrix.h): a byte per
    // block instead of an fp32, so that decode reads about as many bytes as the file holds.
    i8_of_f16,
};

constexpr int kQuantSuperBlock = 256;  // elements per base of QuantScales::i8_of_f16

enum class QuantLayout : int32_t {
    rows,        // row after row, as stored in the model directory
    row_groups,  // eight rows interleaved, as above: what the SIMD kernels read fastest
};

struct QuantMatrix {
    const uint8_t* q = nullptr;      // [rows][row_bytes], as above
    const void* scales = nullptr;    // [rows][n_blocks]: fp32, fp16 bits or int8, as scale_type says
    const void* offsets = nullptr;   // [rows][n_blocks] as `offset` says (minimums of the scales' type); null for none
    const uint16_t* scale_bases = nullptr;  // [rows][n_bases] fp16 bits for i8_of_f16, else null
    const uint16_t* min_bases = nullptr;    // the same for the minimums (offset mins)
    int32_t bits = 4;                // 4 or 8; 6 in row groups only (q6 above)
    int32_t block = 32;              // a power of two, 16..256
    int32_t padded_cols = 0;         // cols rounded up to a multiple of max(block, 32)
    QuantOffset offset = QuantOffset::none;
    QuantScales scale_type = QuantScales::f32;
    QuantLayout layout = QuantLayout::rows;
    QuantXRounding x_rounding = QuantXRounding::onnxruntime;  // the SIMD kernels' rounding of x for this matrix
    // q8 in blocks of 16 with int8 scales (QuantScales::i8_of_f16) and offset none whose integers all lie in
    // -32..31 (GGUF's Q6_K): its copy in row groups is q6 (kernels/quant_row_groups.h, row_groups_bits).
    bool six_bit_values = false;
};

constexpr int kQuantGroupRows = 8;  // rows in a row group

// Where block i of row r's scale (and zero point or minimum) is in the tables.
inline int64_t quant_block_index(const QuantMatrix& w, int64_t r, int64_t i) {
    const int64_t n_blocks = w.padded_cols / w.block;
    if (w.layout == QuantLayout::row_groups)
        return ((r / kQuantGroupRows) * n_blocks + i) * kQuantGroupRows + r % kQuantGroupRows;
    return r * n_blocks + i;
}

// The bases of a row (QuantScales::i8_of_f16): one per 256 elements, the last one maybe for fewer.
inline int64_t quant_base_count(const QuantMatrix& w) { return (w.padded_cols + kQuantSuperBlock - 1) / kQuantSuperBlock; }

// Where base s (elements 256 s .. 256 s + 255) of row r is in the bases' tables (QuantScales::i8_of_f16).
inline int64_t quant_base_index(const QuantMatrix& w, int64_t r, int64_t s) {
    const int64_t n_bases = quant_base_count(w);
    if (w.layout == QuantLayout::row_groups)
        return ((r / kQuantGroupRows) * n_bases + s) * kQuantGroupRows + r % kQuantGroupRows;
    return r * n_bases + s;
}

// The bytes of one entry of the scales' (and minimums') table.
inline size_t quant_scale_bytes(QuantScales type) {
    return type == QuantScales::f32 ? 4 : type == QuantScales::f16 ? 2 : 1;
}

// The padded row length of a [.][cols] matrix in blocks of `block`.
inline int64_t quant_padded_cols(int64_t cols, int32_t block) {
    const int64_t unit = block > 32 ? block : 32;
    return (cols + unit - 1) / unit * unit;
}

// The bytes of the tables of a [rows][.] matrix w in the rows layout: q [rows][row_bytes], scales and offsets
// [rows][n_blocks] (offsets: 1-byte zero points, minimums of the scales' type, or none), and for i8_of_f16
// each of the two base tables [rows][n_bases] (min_bases only for offset mins). What a backend copies
// or uploads, and what a benchmark reads per call.
struct QuantTableBytes {
    size_t q = 0, scales = 0, offsets = 0;
    size_t scale_bases = 0, min_bases = 0;
    size_t total() const { return q + scales + offsets + scale_bases + min_bases; }
};

inline QuantTableBytes quant_table_bytes(const QuantMatrix& w, int64_t rows) {
    const auto n_rows = static_cast<size_t>(rows);
    const auto entries = n_rows * static_cast<size_t>(w.padded_cols / w.block);
    const size_t scale_bytes = quant_scale_bytes(w.scale_type);
    const size_t offset_bytes = w.offset == QuantOffset::none          ? 0
                                : w.offset == QuantOffset::zero_points ? 1
                                                                       : scale_bytes;
    QuantTableBytes t{n_rows * static_cast<size_t>(w.padded_cols) * static_cast<size_t>(w.bits) / 8,
                      entries * scale_bytes, entries * offset_bytes};
    if (w.scale_type == QuantScales::i8_of_f16) {
        t.scale_bases = n_rows * static_cast<size_t>(quant_base_count(w)) * 2;
        if (w.offset == QuantOffset::mins) t.min_bases = t.scale_bases;
    }
    return t;
}

// Element j of row r's integers, 0..15 for q4, -128..127 for q8.
inline int32_t quant_value(const QuantMatrix& w, int64_t r, int64_t j) {
    if (w.layout == QuantLayout::row_groups && w.bits == 6) {
        const int64_t block = (r / kQuantGroupRows) * (w.padded_cols / 16) + j / 16;
        const int64_t e = j % 16, at = r % kQuantGroupRows * 4 + e % 4;  // the element in its block; its byte in a chunk
        const uint8_t* chunks = w.q + block * 96;
        const uint8_t low = chunks[e / 4 % 2 * 32 + at];
        const int32_t high = (chunks[64 + at] >> (2 * (e / 4))) & 3;
        return ((e < 8 ? low & 0x0f : low >> 4) | high << 4) - 32;
    }
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

// Block i of row r's entry in a table of w's scale type (its scales, or its minimums with their bases), as
// fp32: fp16 widens exactly, and an int8 multiplier times its widened base is exact.
inline float quant_block_float(const QuantMatrix& w, const void* table, const uint16_t* bases, int64_t r, int64_t i) {
    const int64_t b = quant_block_index(w, r, i);
    switch (w.scale_type) {
        case QuantScales::f32: return static_cast<const float*>(table)[b];
        case QuantScales::f16: return f16_to_f32(static_cast<const uint16_t*>(table)[b]);
        case QuantScales::i8_of_f16: break;
    }
    const float base = f16_to_f32(bases[quant_base_index(w, r, i * w.block / kQuantSuperBlock)]);
    return base * static_cast<float>(static_cast<const int8_t*>(table)[b]);
}
inline float quant_block_scale(const QuantMatrix& w, int64_t r, int64_t i) { return quant_block_float(w, w.scales, w.scale_bases, r, i); }
inline float quant_block_min(const QuantMatrix& w, int64_t r, int64_t i) { return quant_block_float(w, w.offsets, w.min_bases, r, i); }

// Row r of w as fp32 into out[cols]: the reference dequantization (an embedding lookup; the reference
// matmul). Each weight is s * (q - z) or s * q + m computed in fp32, as ONNX Runtime's and llama.cpp's
// dequantization compute it.
inline void dequantize_row(const QuantMatrix& w, int64_t r, int64_t cols, float* out) {
    for (int64_t j = 0; j < cols; ++j) {
        const int64_t b = quant_block_index(w, r, j / w.block);
        const float s = quant_block_scale(w, r, j / w.block);
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
                out[j] = s * static_cast<float>(q) + quant_block_min(w, r, j / w.block);
                break;
        }
    }
}

}  // namespace kvx
