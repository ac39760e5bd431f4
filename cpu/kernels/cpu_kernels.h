// The SIMD CPU kernels: one KernelTable per instruction-set level, chosen at run time.
//
// Each level is compiled in its own translation unit with its own flags (cpu/kernels/CMakeLists.txt), so one
// binary runs on any x86-64 and uses the widest vectors the machine has. Off x86 only the portable level
// exists.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "kernels/baseline_kernels.h"
#include "kernels/kernels.h"

namespace kvx::cpu {

enum class SimdLevel {
    portable,  // plain C++, vectorised by the compiler for the baseline target
    avx2,      // AVX2 + FMA + F16C, 8 fp32 lanes
    avx512,    // AVX-512F/BW/VL + FMA + F16C, 16 fp32 lanes (BW/VL for the quantized matmul)
    avx512_vnni,  // avx512 + VNNI: the quantized matmul's int8 dot products in vpdpbusd
};

// "portable", "avx2", "avx512", "avx512vnni": also the values --simd and KVX_SIMD accept.
const char* simd_level_name(SimdLevel level);

// The level simd_level_name gives `name`, or nothing for any other name.
std::optional<SimdLevel> simd_level_named(std::string_view name);

// The levels this machine (CPU and operating system) can run, narrowest first; portable is always there.
std::vector<SimdLevel> supported_simd_levels();

// The widest supported level.
SimdLevel best_simd_level();

// The kernels of one level. Throws kvx::Error naming the level and the supported ones if this machine
// cannot run it.
const KernelTable& cpu_kernels(SimdLevel level);

// The same level's contiguous-cache baselines (kernels/baseline_kernels.h), for benchmarks and tests.
const BaselineKernelTable& cpu_baseline_kernels(SimdLevel level);

}  // namespace kvx::cpu
