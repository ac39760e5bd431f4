// Random inputs for the kernel tests of both backends (cpu/kernels/test_support.h and
// cuda/kernels/test_support.h take them from here). Header-only; test code only.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kvx::testing {

// n floats uniform in [lo, hi); the same seed gives the same floats.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

}  // namespace kvx::testing
