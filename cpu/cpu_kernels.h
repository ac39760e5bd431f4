// The SIMD CPU backend: one KernelTable per instruction-set level, chosen at run time.
//
// Each level is compiled in its own translation unit with its own flags (cpu/CMakeLists.txt), so one
// binary runs on any x86-64 and uses the widest vectors the machine has. Off x86 only the portable level
// exists.
#pragma once

#include <vector>

#include "kernels/kernels.h"

namespace kvx::cpu {

enum class SimdLevel {
    portable,  // plain C++, vectorised by the compiler for the baseline target
    avx2,      // AVX2 + FMA + F16C, 8 fp32 lanes
    avx512,    // AVX-512F + FMA + F16C, 16 fp32 lanes
};

// "portable", "avx2", "avx512": also the values KVX_SIMD accepts.
const char* simd_level_name(SimdLevel level);

// The levels this machine (CPU and operating system) can run, narrowest first; portable is always there.
std::vector<SimdLevel> supported_simd_levels();

// The widest supported level.
SimdLevel best_simd_level();

// The kernels of one level. Throws std::runtime_error naming the level if this machine cannot run it.
const KernelTable& cpu_kernels(SimdLevel level);

// The kernels of the level named by the environment variable KVX_SIMD: unset, empty or "auto" for the best
// level, else "avx512", "avx2" or "portable". Throws std::runtime_error with a one-line message naming the
// value and the supported levels if the value is unknown or names a level this machine cannot run.
const KernelTable& cpu_kernels_from_env();

}  // namespace kvx::cpu
