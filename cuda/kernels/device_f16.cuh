// fp16 <-> fp32 in device code, with the results of kernels/f16.h bit for bit: the host's conversions are
// the oracle, and a KV cache or an embedding written on one side must read the same on the other.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace kvx::cuda {

// Exact for every fp16 value (normal, subnormal, zero, inf); a NaN stays a NaN.
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Round to nearest, ties to even, as f32_to_f16 (beyond 65504 it becomes inf, below the smallest normal a
// subnormal). The hardware's conversion does all of that; only its NaN is the canonical 0x7fff, so a NaN is
// rewritten as f32_to_f16 writes it: the sign kept, the quiet bit set.
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
    if (isnan(f)) return static_cast<uint16_t>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(f));
}

}  // namespace kvx::cuda
