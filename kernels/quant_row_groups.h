// A q4 or q8 matrix of rows (QuantLayout::rows) copied into row groups (QuantLayout::row_groups,
// kernels/quant_matrix.h), the layout the SIMD kernels read fastest: a backend makes the copy once, at load
// time, and keeps the model directory's layout as it is.
//
// Why: in rows, a GEMV tile reads a few rows side by side and every block's integer dot product ends in a
// horizontal sum and per-lane scales; in row groups one register holds the same four bytes of eight rows,
// each row's dot product stays in its own lane, and a block costs a scale load and one FMA for eight rows
// (measured on Zen 4, one thread, 576 x 1536 from DRAM: 11.7 GB/s in rows, 23 GB/s in row groups).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/quant_matrix.h"

namespace kvx {

// Whether w can be copied into row groups: q4 in blocks of 32 or q8 in blocks of 16 or 32, around the format's
// zero or with a minimum per block (GGUF's Q4_1, and Q4_K / Q5_K / Q6_K as gguf_matrix.h keeps them), in rows.
inline bool row_groups_fit(const QuantMatrix& w) {
    return w.layout == QuantLayout::rows && ((w.bits == 4 && w.block == 32) || (w.bits == 8 && (w.block == 16 || w.block == 32))) &&
           (w.offset == QuantOffset::none || w.offset == QuantOffset::mins);
}

// The row groups of a copy of `rows` rows: ceil(rows / 8), rounded up to an even number, because the AVX-512
// kernels read groups two at a time, an even group and the next (cpu/kernels/quant_row_lanes_avx512.inc); a
// padding group is zero, as padding rows are.
inline int64_t row_group_count(int64_t rows) {
    const int64_t groups = (rows + kQuantGroupRows - 1) / kQuantGroupRows;
    return groups + groups % 2;
}

// The bits of the integers of w's copy in row groups: 6 for six-bit values (q6, kernels/quant_matrix.h), else
// w's own. q6 takes 12 bytes per 16 elements of a row where q8 takes 16, and only its one form is compiled.
inline int32_t row_groups_bits(const QuantMatrix& w) {
    const bool q6 = w.layout == QuantLayout::rows && w.six_bit_values && w.bits == 8 && w.block == 16 &&
                    w.offset == QuantOffset::none && w.scale_type == QuantScales::i8_of_f16;
    return q6 ? 6 : w.bits;
}

// The integer bytes of one block of a row group of w's copy: `block` elements of 8 rows.
inline int64_t row_group_block_bytes(const QuantMatrix& w) {
    return int64_t{w.block} * kQuantGroupRows * row_groups_bits(w) / 8;
}

// The tables of w's copy in row groups, one after another: the integers [row_groups][n_blocks][block_bytes],
// the scales [row_groups][n_blocks][8] of w's scale type, as many minimums for offset mins, and for
// QuantScales::i8_of_f16 the bases of each [row_groups][n_bases][8] fp16.
struct RowGroupTables {
    size_t q = 0, scales = 0, mins = 0, scale_bases = 0, min_bases = 0;  // bytes of each
    size_t total() const { return q + scales + mins + scale_bases + min_bases; }
};
inline RowGroupTables row_group_tables(const QuantMatrix& w, int64_t rows) {
    const auto groups = static_cast<size_t>(row_group_count(rows));
    const auto n_blocks = static_cast<size_t>(w.padded_cols / w.block);
    RowGroupTables t;
    t.q = groups * n_blocks * static_cast<size_t>(row_group_block_bytes(w));
    t.scales = groups * n_blocks * kQuantGroupRows * quant_scale_bytes(w.scale_type);
    t.mins = w.offset == QuantOffset::mins ? t.scales : 0;
    if (w.scale_type == QuantScales::i8_of_f16) {
        t.scale_bases = groups * static_cast<size_t>(quant_base_count(w)) * kQuantGroupRows * 2;
        t.min_bases = w.offset == QuantOffset::mins ? t.scale_bases : 0;
    }
    return t;
}

// The bytes of w's copy in row groups (row_group_tables).
inline size_t row_groups_bytes(const QuantMatrix& w, int64_t rows) { return row_group_tables(w, rows).total(); }

// The QuantMatrix that reads a copy of w [rows][.] (which must fit, row_groups_fit) at dst,
// row_groups_bytes(w, rows) bytes at any 4-byte aligned address, its tables as row_group_tables says. Writes
// nothing.
inline QuantMatrix row_groups_copy_at(const QuantMatrix& w, int64_t rows, uint8_t* dst) {
    const RowGroupTables t = row_group_tables(w, rows);
    QuantMatrix copy = w;
    copy.bits = row_groups_bits(w);
    copy.q = dst;
    uint8_t* scales = dst + t.q;
    copy.scales = scales;
    copy.offsets = w.offset == QuantOffset::mins ? scales + t.scales : nullptr;
    uint8_t* bases = scales + t.scales + t.mins;
    copy.scale_bases = t.scale_bases ? reinterpret_cast<const uint16_t*>(bases) : nullptr;
    copy.min_bases = t.min_bases ? reinterpret_cast<const uint16_t*>(bases + t.scale_bases) : nullptr;
    copy.layout = QuantLayout::row_groups;
    return copy;
}

// Writes row group g (0 <= g < row_group_count(rows)) of the copy of a matrix [rows][.] at dst
// (row_groups_copy_at), from w, which holds that matrix's rows from w_first_row on in rows layout: all of them
// (w_first_row 0), or a slab that a loader converts one piece at a time so as not to hold a whole second copy
// (the group's rows must all be in it). Groups touch disjoint bytes, so a loader may write them on several
// threads: the first touch of a model's weights is seconds of page faults and copying at 3B on one core.
inline void copy_row_group(const QuantMatrix& w, int64_t rows, uint8_t* dst, int64_t g, int64_t w_first_row = 0) {
    const QuantMatrix copy = row_groups_copy_at(w, rows, dst);
    const RowGroupTables t = row_group_tables(w, rows);
    const auto groups = static_cast<size_t>(row_group_count(rows));
    const int64_t n_blocks = w.padded_cols / w.block;
    const int64_t n_bases = quant_base_count(w);
    const size_t scale_bytes = quant_scale_bytes(w.scale_type);
    const int64_t block_bytes = row_group_block_bytes(w);
    const int64_t source_block_bytes = int64_t{w.block} * w.bits / 8;  // of a row, in rows
    const int chunks = static_cast<int>(block_bytes / 32);  // of 4 bytes per row, in a block
    const bool q6 = copy.bits == 6;
    uint8_t* q = dst;
    auto writable = [&](const void* table) { return dst + (static_cast<const uint8_t*>(table) - copy.q); };
    // Padding rows and groups: integers at the zero (8 for q4, 128 for offset-binary q8), scale 0 and minimum 0,
    // so that they add nothing.
    const size_t group_q_bytes = t.q / groups;
    if (q6) {  // 32 in every element: low bits 0, high bits 2
        for (int64_t i = 0; i < n_blocks; ++i) {
            uint8_t* block = q + static_cast<size_t>(g) * group_q_bytes + static_cast<size_t>(i * block_bytes);
            std::memset(block, 0, 64);
            std::memset(block + 64, 0xaa, 32);
        }
    } else {
        std::memset(q + static_cast<size_t>(g) * group_q_bytes, w.bits == 8 ? 0x80 : 0x88, group_q_bytes);
    }
    for (const auto& [table, bytes] : {std::pair{copy.scales, t.scales}, std::pair{copy.offsets, t.mins},
                                       std::pair<const void*, size_t>{copy.scale_bases, t.scale_bases},
                                       std::pair<const void*, size_t>{copy.min_bases, t.min_bases}})
        if (table) std::memset(writable(table) + static_cast<size_t>(g) * (bytes / groups), 0, bytes / groups);
    // An entry of `bytes` bytes at index `from` of a rows-layout table to index `to` of its copy.
    auto copy_entry = [&](const void* from_table, const void* to_table, int64_t from, int64_t to, size_t bytes) {
        std::memcpy(writable(to_table) + static_cast<size_t>(to) * bytes,
                    static_cast<const uint8_t*>(from_table) + static_cast<size_t>(from) * bytes, bytes);
    };
    const int64_t row_end = (g + 1) * kQuantGroupRows < rows ? (g + 1) * kQuantGroupRows : rows;
    for (int64_t r = g * kQuantGroupRows; r < row_end; ++r) {
        // Row r's block 0 in either layout's tables; block i is i entries on in rows, i groups of 8 in row groups
        // (quant_block_index, without its division per block).
        const int64_t from_row = quant_block_index(w, r - w_first_row, 0), to_row = quant_block_index(copy, r, 0);
        for (int64_t i = 0; i < n_blocks; ++i) {
            // Row r's block i: block * bits / 8 bytes at the same table position as its scale, in either layout.
            const int64_t from = from_row + i, to = to_row + i * kQuantGroupRows;
            const uint8_t* src = w.q + from * source_block_bytes;
            uint8_t* to_q = q + to / kQuantGroupRows * block_bytes + r % kQuantGroupRows * 4;
            if (q6) {
                uint8_t v[16];  // q + 32
                for (int e = 0; e < 16; ++e) v[e] = static_cast<uint8_t>(static_cast<int8_t>(src[e]) + 32);
                for (int e = 0; e < 4; ++e) {  // byte e of the row's 4 in each chunk
                    to_q[e] = static_cast<uint8_t>((v[e] & 0x0f) | (v[8 + e] & 0x0f) << 4);
                    to_q[32 + e] = static_cast<uint8_t>((v[4 + e] & 0x0f) | (v[12 + e] & 0x0f) << 4);
                    to_q[64 + e] = static_cast<uint8_t>(v[e] >> 4 | (v[4 + e] >> 4) << 2 | (v[8 + e] >> 4) << 4 | (v[12 + e] >> 4) << 6);
                }
            } else {
                for (int chunk = 0; chunk < chunks; ++chunk) {
                    std::memcpy(to_q + chunk * 32, src + chunk * 4, 4);
                    if (w.bits == 8)
                        for (int b = 0; b < 4; ++b) to_q[chunk * 32 + b] ^= 0x80;  // int8 q to q + 128
                }
            }
            copy_entry(w.scales, copy.scales, from, to, scale_bytes);
            if (copy.offsets) copy_entry(w.offsets, copy.offsets, from, to, scale_bytes);
        }
        if (!copy.scale_bases) continue;
        const int64_t from_base = quant_base_index(w, r - w_first_row, 0), to_base = quant_base_index(copy, r, 0);
        for (int64_t s = 0; s < n_bases; ++s) {
            const int64_t from = from_base + s, to = to_base + s * kQuantGroupRows;
            copy_entry(w.scale_bases, copy.scale_bases, from, to, 2);
            if (copy.min_bases) copy_entry(w.min_bases, copy.min_bases, from, to, 2);
        }
    }
}

// Copies w [rows][.] (which must fit, row_groups_fit) into dst, row_groups_bytes(w, rows) bytes at any 4-byte
// aligned address, on the calling thread, and returns the QuantMatrix that reads the copy. Loaders of whole
// models share the groups out over their threads instead (row_groups_copy_at, copy_row_group).
inline QuantMatrix copy_to_row_groups(const QuantMatrix& w, int64_t rows, uint8_t* dst) {
    for (int64_t g = 0; g < row_group_count(rows); ++g) copy_row_group(w, rows, dst, g);
    return row_groups_copy_at(w, rows, dst);
}

// A copy that owns its bytes, for code that copies one matrix at a time (tests, benchmarks); a backend
// places its copies side by side with copy_to_row_groups.
class QuantRowGroups {
public:
    // w [rows][.] must fit (row_groups_fit).
    QuantRowGroups(const QuantMatrix& w, int64_t rows)
        : bytes_((row_groups_bytes(w, rows) + 3) / 4), matrix_(copy_to_row_groups(w, rows, reinterpret_cast<uint8_t*>(bytes_.data()))) {}
    QuantRowGroups(const QuantRowGroups&) = delete;
    QuantRowGroups& operator=(const QuantRowGroups&) = delete;

    const QuantMatrix& matrix() const { return matrix_; }

private:
    std::vector<uint32_t> bytes_;  // the copy (row_groups_bytes), in words so the scales stay aligned
    QuantMatrix matrix_;
};

}  // namespace kvx
