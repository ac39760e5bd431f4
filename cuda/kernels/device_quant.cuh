// Device-side reading of a quantized matrix (kernels/quant_matrix.h, docs/model-format.md "Quantized
// matrices"), shared by the quantized GEMV (gemv_quant.cu) and the dequantize kernels (dequantize.cu). Every
// weight is computed as the reference's dequantize_row computes it, s * float(q - z), or s * q + m with the
// product and the sum rounded separately (no FMA contraction), so that a dequantized weight is the host's
// bit for bit.
//
// q is read in 16-byte vectors: 16 elements of q8, or one 32-element group of q4 (byte t: element t in the low
// nibble, element t + 16 in the high one). Rows start 16-byte aligned when q does (row_bytes is
// padded_cols * bits / 8 and padded_cols a multiple of 32).
#pragma once

#include <cstdint>

#include "cuda/kernels/device_f16.cuh"
#include "cuda/kernels/device_vector.cuh"
#include "cuda/kernels/launch_shape.h"
#include "kernels/quant_matrix.h"

namespace kvx::cuda {

// One block's parameters as fp32: scale, integer zero (offset none and zero_points) or minimum (mins).
struct QuantBlock {
    float scale;
    int32_t zero;
    float min;
};

// Entry (row, block) of a table of w's scale type (its scales, or its minimums with their bases) as fp32, at
// index row * n_blocks + block of the row-major tables: an int8 multiplier times its row's base of the block's
// 256 elements, exact.
__device__ __forceinline__ float load_quant_float(const QuantMatrix& w, const void* table, const uint16_t* bases,
                                                  int64_t row, int64_t block, int64_t index) {
    switch (w.scale_type) {
        case QuantScales::f32: return __ldg(static_cast<const float*>(table) + index);
        case QuantScales::f16: return f16_bits_to_f32(__ldg(static_cast<const uint16_t*>(table) + index));
        case QuantScales::i8_of_f16: break;
    }
    const int n_bases = (w.padded_cols + kQuantSuperBlock - 1) / kQuantSuperBlock;  // quant_base_count, on the device
    const float base = f16_bits_to_f32(__ldg(bases + row * n_bases + block * w.block / kQuantSuperBlock));
    return __fmul_rn(base, static_cast<float>(__ldg(static_cast<const int8_t*>(table) + index)));
}

// Block `block` of row `row` of w, whose rows have n_blocks blocks. The tables are read with their own type's
// alignment, which their separate allocations give.
__device__ __forceinline__ QuantBlock load_quant_block(const QuantMatrix& w, int64_t row, int64_t n_blocks, int64_t block) {
    const int64_t index = row * n_blocks + block;
    QuantBlock b;
    b.scale = load_quant_float(w, w.scales, w.scale_bases, row, block, index);
    b.zero = w.bits == 4 ? 8 : 0;
    b.min = 0.0f;
    if (w.offset == QuantOffset::zero_points) {
        b.zero = w.bits == 4 ? int32_t{__ldg(static_cast<const uint8_t*>(w.offsets) + index)}
                             : int32_t{__ldg(static_cast<const int8_t*>(w.offsets) + index)};
    } else if (w.offset == QuantOffset::mins) {
        b.zero = 0;
        b.min = load_quant_float(w, w.offsets, w.min_bases, row, block, index);
    }
    return b;
}

// The weight of integer q in block b. mins: the product rounded before the sum (__fmul_rn / __fadd_rn are
// never contracted into an FMA), as the host computes it; adding a zero minimum instead of branching would
// turn a -0 weight into +0.
__device__ __forceinline__ float dequantize_value(const QuantBlock& b, int32_t q, bool mins) {
    return mins ? __fadd_rn(__fmul_rn(b.scale, static_cast<float>(q)), b.min) : b.scale * static_cast<float>(q - b.zero);
}

// Byte i (0..15) of a 16-byte vector; byte 0 is the lowest of raw.x (little-endian, as the bytes lay in memory).
__device__ __forceinline__ uint32_t vector_byte(const uint4& raw, int i) {
    const uint32_t word = i < 4 ? raw.x : i < 8 ? raw.y : i < 12 ? raw.z : raw.w;
    return (word >> (8 * (i % 4))) & 0xffu;
}

// The 16 bytes at p: one vector load where p is 16-byte aligned, else 16 byte loads (the scalar fallback of
// an unaligned q; real uploads are always aligned).
__device__ __forceinline__ uint4 load_q_vector(const uint8_t* p, bool aligned) {
    if (aligned) return __ldg(reinterpret_cast<const uint4*>(p));
    uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        words[i] = uint32_t{__ldg(p + 4 * i)} | (uint32_t{__ldg(p + 4 * i + 1)} << 8) |
                   (uint32_t{__ldg(p + 4 * i + 2)} << 16) | (uint32_t{__ldg(p + 4 * i + 3)} << 24);
    return make_uint4(words[0], words[1], words[2], words[3]);
}

// Elements one 16-byte vector of q holds.
template <int kBits>
constexpr int kQuantVectorElems = kBits == 8 ? 16 : 32;

// A vector is dequantized in units of 16 consecutive elements: the whole vector for q8; for q4 its low nibbles
// (elements 0..15 of the group, part 0) and its high nibbles (16..31, part 1). A unit starts at a multiple of
// 16, so it lies in one block. Working a unit at a time keeps 16 weights live, not 32, which keeps the
// 8-row q4 GEMV within its registers.
constexpr int kQuantUnitElems = 16;

// The weights of unit `part` of vector raw into v, in element order: the unit lies in block `block` (its first
// element / w.block) of row `row`, whose rows have n_blocks blocks.
template <int kBits>
__device__ __forceinline__ void dequantize_unit(const QuantMatrix& w, int64_t row, int64_t n_blocks, int64_t block,
                                                const uint4& raw, int part, float (&v)[kQuantUnitElems]) {
    const bool mins = w.offset == QuantOffset::mins;
    const QuantBlock b = load_quant_block(w, row, n_blocks, block);
#pragma unroll
    for (int i = 0; i < kQuantUnitElems; ++i) {
        const uint32_t byte = vector_byte(raw, i);
        int32_t q;
        if constexpr (kBits == 8)
            q = static_cast<int8_t>(byte);
        else
            q = static_cast<int32_t>(part == 0 ? byte & 0x0fu : byte >> 4);
        v[i] = dequantize_value(b, q, mins);
    }
}

// Host: throws kvx::Error "KERNEL: ..." unless w is a quantized matrix of `cols` columns the kernels can read
// (the loader checks the same for a file; this guards the launch functions' other callers).
inline void require_quant_matrix(const QuantMatrix& w, int64_t cols, const char* kernel) {
    require(w.bits == 4 || w.bits == 8, kernel, "bits must be 4 or 8");
    require(w.block >= 16 && w.block <= 256 && (w.block & (w.block - 1)) == 0, kernel,
            "block must be a power of two in 16 .. 256");
    require(w.padded_cols == quant_padded_cols(cols, w.block), kernel,
            "padded_cols must be cols rounded up to a multiple of max(block, 32)");
    require(w.q && w.scales, kernel, "null integers or scales");
    require(w.offset == QuantOffset::none || w.offsets, kernel, "null zero points or minimums");
    const uintptr_t float_bytes = quant_scale_bytes(w.scale_type);
    require(is_aligned(w.scales, float_bytes), kernel, "scales not aligned to their type");
    require(w.offset != QuantOffset::mins || is_aligned(w.offsets, float_bytes), kernel,
            "minimums not aligned to their type");
    if (w.scale_type == QuantScales::i8_of_f16) {
        require(w.scale_bases && is_aligned(w.scale_bases, 2), kernel, "null or misaligned scale bases");
        require(w.offset != QuantOffset::mins || (w.min_bases && is_aligned(w.min_bases, 2)), kernel,
                "null or misaligned minimum bases");
    }
}

}  // namespace kvx::cuda
