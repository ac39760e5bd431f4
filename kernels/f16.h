// IEEE 754 binary16 <-> binary32, bit-exact and portable: the oracle for the F16C / AVX-512 conversions
// of the CPU kernels, and the converter's and loader's view of fp16 weights.
#pragma once

#include <bit>
#include <cstdint>

namespace kvx {

// Every fp16 value (normal, subnormal, zero, inf, NaN) is exactly representable in fp32.
inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
    if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    if (mantissa == 0) return std::bit_cast<float>(sign);  // signed zero
    // Subnormal: shift the mantissa up until its leading 1 becomes the implicit bit.
    uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

// Round to nearest, ties to even, as numpy's astype(float16) and F16C's _mm_cvtps_ph do.
inline uint16_t f32_to_f16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u)  // inf or NaN (NaN stays quiet)
        return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds beyond 65504: inf
    if (abs < 0x38800000u) {  // below the smallest normal fp16: a subnormal or zero
        const float magic = std::bit_cast<float>(0x3f000000u);  // 0.5: aligns the fp16 subnormal ulp
        const uint32_t r = std::bit_cast<uint32_t>(std::bit_cast<float>(abs) + magic) - 0x3f000000u;
        return static_cast<uint16_t>(sign | r);
    }
    const uint32_t mantissa_odd = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round
    return static_cast<uint16_t>(sign | (rounded >> 13));
}

}  // namespace kvx
