// An fp16 matrix in row groups: eight rows interleaved sixteen elements at a time, the layout the SIMD decode
// GEMV reads fastest (KernelTable::matmul_f16_row_groups). A backend copies a [m][k] matrix of rows into it
// once, at load time; the model directory keeps its rows.
//
//   [row_groups][chunks][8 rows][16 elements] of fp16 bits     row_groups = ceil(m / 8), chunks = ceil(k / 16)
//
// Row r's elements 16c .. 16c + 15 are 16 consecutive values at ((r / 8) * chunks + c) * 128 + (r % 8) * 16;
// rows past m and elements past k are zero.
//
// Why: in rows, a GEMV tile reads 8 rows side by side, 8 streams each only k * 2 bytes long, which the
// hardware prefetchers follow poorly, so the kernel runs a software prefetch stream ahead of them. In row
// groups a tile reads one contiguous stream in address order, and needs no prefetch stream (a prefetch stream
// 32 KB ahead cost a third). Measured on Zen 4, one thread, from huge pages (kvx-bench gemv/f16 against
// gemv/f16-rows, medians of 3): 29.9-30.7 GB/s in row groups, 20.5-23.8 in rows, at SmolLM2's shapes.
// The arithmetic is the same: each row's lane-wise sums run over the same elements in the same order, so a
// GEMV in row groups gives the bits of one in rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvx {

constexpr int kF16GroupRows = 8;   // rows in a row group
constexpr int kF16ChunkElems = 16;  // consecutive elements of a row

// Elements (fp16 values) of an [m][k] matrix's copy in row groups.
inline size_t f16_row_groups_elems(int64_t m, int64_t k) {
    const int64_t groups = (m + kF16GroupRows - 1) / kF16GroupRows;
    const int64_t chunks = (k + kF16ChunkElems - 1) / kF16ChunkElems;
    return static_cast<size_t>(groups * chunks * kF16GroupRows * kF16ChunkElems);
}

// Where element l of row r is in the copy of a matrix of k columns.
inline int64_t f16_row_groups_index(int64_t r, int64_t l, int64_t k) {
    const int64_t chunks = (k + kF16ChunkElems - 1) / kF16ChunkElems;
    return ((r / kF16GroupRows) * chunks + l / kF16ChunkElems) * (kF16GroupRows * kF16ChunkElems) +
           (r % kF16GroupRows) * kF16ChunkElems + l % kF16ChunkElems;
}

// dst [f16_row_groups_elems(m, k)] = w [m][k] in row groups, padding zero.
inline void copy_to_f16_row_groups(const uint16_t* w, int64_t m, int64_t k, uint16_t* dst) {
    std::memset(dst, 0, f16_row_groups_elems(m, k) * sizeof(uint16_t));
    for (int64_t r = 0; r < m; ++r)
        for (int64_t l = 0; l < k; l += kF16ChunkElems) {
            const int64_t n = k - l < kF16ChunkElems ? k - l : kF16ChunkElems;
            std::memcpy(dst + f16_row_groups_index(r, l, k), w + r * k + l, static_cast<size_t>(n) * sizeof(uint16_t));
        }
}

}  // namespace kvx
