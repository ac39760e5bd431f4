// What the CPU kernel tests share: running a check on every SIMD level, random inputs, thread counts.
#pragma once

#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "cpu/kernels/cpu_kernels.h"
#include "kernels/kernels.h"
#include "kernels/test_inputs.h"

namespace kvx::cpu::testing {

inline constexpr SimdLevel kAllLevels[] = {SimdLevel::portable, SimdLevel::avx2, SimdLevel::avx512,
                                           SimdLevel::avx512_vnni};

inline bool machine_runs(SimdLevel level) {
    const std::vector<SimdLevel> supported = kvx::cpu::supported_simd_levels();
    return std::find(supported.begin(), supported.end(), level) != supported.end();
}

// Calls check(kernels), or check(kernels, baselines) where it takes both, for every SIMD level this machine
// runs. A level it cannot run is reported as skipped and must refuse to hand out its kernels.
template <class Check>
void for_each_level(Check check) {
    for (SimdLevel level : kAllLevels) {
        const char* name = kvx::cpu::simd_level_name(level);
        if (!machine_runs(level)) {
            WARN("SIMD level " << name << " skipped: this machine or this build cannot run it");
            CHECK_THROWS(kvx::cpu::cpu_kernels(level));
            CHECK_THROWS(kvx::cpu::cpu_baseline_kernels(level));
            continue;
        }
        INFO("SIMD level " << name);
        if constexpr (std::is_invocable_v<Check, const kvx::KernelTable&, const kvx::BaselineKernelTable&>)
            check(kvx::cpu::cpu_kernels(level), kvx::cpu::cpu_baseline_kernels(level));
        else
            check(kvx::cpu::cpu_kernels(level));
    }
}

using kvx::testing::random_floats;

inline std::vector<float> nan_filled(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

// Sets the OpenMP thread count for one scope.
class ThreadCount {
public:
    explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
    ~ThreadCount() { omp_set_num_threads(saved_); }
    ThreadCount(const ThreadCount&) = delete;
    ThreadCount& operator=(const ThreadCount&) = delete;

private:
    int saved_;
};

}  // namespace kvx::cpu::testing
