// Loads and stores of kVec consecutive elements (kVec = 4: one 16-byte float4, or 8 bytes of fp16; kVec = 1:
// scalar), so that one kernel body serves both the vectorised path and the scalar path of awkward sizes and
// alignments. The caller guarantees the alignment of the vector forms (is_aligned).
#pragma once

#include <cstdint>

#include "cuda/kernels/device_f16.cuh"

namespace kvx::cuda {

// Host and device: whether p (null counts as aligned: an absent operand constrains nothing) is a multiple
// of bytes.
__host__ __device__ inline bool is_aligned(const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <int kVec>
__device__ __forceinline__ void load_floats(const float* p, float (&v)[kVec]) {
    static_assert(kVec == 1 || kVec == 4);
    if constexpr (kVec == 4) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        v[0] = t.x;
        v[1] = t.y;
        v[2] = t.z;
        v[3] = t.w;
    } else {
        v[0] = *p;
    }
}

template <int kVec>
__device__ __forceinline__ void store_floats(float* p, const float (&v)[kVec]) {
    static_assert(kVec == 1 || kVec == 4);
    if constexpr (kVec == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        *p = v[0];
    }
}

// fp16 bits at p (8-byte aligned for kVec = 4), converted exactly.
template <int kVec>
__device__ __forceinline__ void load_f16_as_floats(const uint16_t* p, float (&v)[kVec]) {
    static_assert(kVec == 1 || kVec == 4);
    if constexpr (kVec == 4) {
        const uint2 t = *reinterpret_cast<const uint2*>(p);  // element 0 in the low half of t.x
        v[0] = f16_bits_to_f32(static_cast<uint16_t>(t.x & 0xffffu));
        v[1] = f16_bits_to_f32(static_cast<uint16_t>(t.x >> 16));
        v[2] = f16_bits_to_f32(static_cast<uint16_t>(t.y & 0xffffu));
        v[3] = f16_bits_to_f32(static_cast<uint16_t>(t.y >> 16));
    } else {
        v[0] = f16_bits_to_f32(*p);
    }
}

// v rounded to fp16 bits at p (8-byte aligned for kVec = 4).
template <int kVec>
__device__ __forceinline__ void store_floats_as_f16(uint16_t* p, const float (&v)[kVec]) {
    static_assert(kVec == 1 || kVec == 4);
    if constexpr (kVec == 4) {
        uint2 t;
        t.x = uint32_t{f32_to_f16_bits(v[0])} | (uint32_t{f32_to_f16_bits(v[1])} << 16);
        t.y = uint32_t{f32_to_f16_bits(v[2])} | (uint32_t{f32_to_f16_bits(v[3])} << 16);
        *reinterpret_cast<uint2*>(p) = t;
    } else {
        *p = f32_to_f16_bits(v[0]);
    }
}

}  // namespace kvx::cuda
