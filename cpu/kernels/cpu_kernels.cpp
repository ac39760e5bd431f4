// Which SIMD levels this machine runs, and the kernel table of each.
#include "cpu/kernels/cpu_kernels.h"

#include <string>
#include <vector>

#include "cpu/kernels/isa_kernel_tables.h"
#include "kernels/error.h"

#if KVX_CPU_X86_SIMD
#include <cpuid.h>
#endif

namespace kvx::cpu {
namespace {

constexpr SimdLevel kAllLevels[] = {SimdLevel::portable, SimdLevel::avx2, SimdLevel::avx512, SimdLevel::avx512_vnni};

// Whether this build has the level's kernels (cpu/kernels/CMakeLists.txt: KVX_CPU_AVX512_VNNI).
bool built(SimdLevel level) {
#if KVX_CPU_AVX512_VNNI
    constexpr bool has_vnni = true;
#else
    constexpr bool has_vnni = false;
#endif
    return level != SimdLevel::avx512_vnni || has_vnni;
}

#if KVX_CPU_X86_SIMD
// __builtin_cpu_supports checks the OS too (that it saves the ymm / zmm state); F16C is read from CPUID
// directly because not every compiler's __builtin_cpu_supports knows it.
bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool machine_runs(SimdLevel level) {
    __builtin_cpu_init();
    switch (level) {
        case SimdLevel::portable:
            return true;
        case SimdLevel::avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
        case SimdLevel::avx512:
            // BW and VL (every AVX-512 CPU since Skylake-SP; only Xeon Phi lacks them): the quantized
            // matmul's byte arithmetic and masked 8- and 16-bit loads.
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && cpu_has_f16c();
        case SimdLevel::avx512_vnni:
            return built(level) && machine_runs(SimdLevel::avx512) && __builtin_cpu_supports("avx512vnni");
    }
    return false;
}
#else
bool machine_runs(SimdLevel level) { return level == SimdLevel::portable; }
#endif

std::string supported_names() {
    std::string names;
    for (SimdLevel level : supported_simd_levels()) {
        if (!names.empty()) names += ", ";
        names += simd_level_name(level);
    }
    return names;
}

const IsaTables& tables_of(SimdLevel level) {
    if (!built(level))
        throw Error(std::string("this build leaves out the ") + simd_level_name(level) + " CPU kernels (supported: " +
                    supported_names() + ")");
    if (!machine_runs(level))
        throw Error(std::string("this machine cannot run the ") + simd_level_name(level) + " CPU kernels (supported: " +
                    supported_names() + ")");
    switch (level) {
#if KVX_CPU_AVX512_VNNI
        case SimdLevel::avx512_vnni:
            return avx512_vnni::tables();
#endif
#if KVX_CPU_X86_SIMD
        case SimdLevel::avx512:
            return avx512::tables();
        case SimdLevel::avx2:
            return avx2::tables();
#endif
        default:
            return portable::tables();
    }
}

}  // namespace

const char* simd_level_name(SimdLevel level) {
    switch (level) {
        case SimdLevel::portable:
            return "portable";
        case SimdLevel::avx2:
            return "avx2";
        case SimdLevel::avx512:
            return "avx512";
        case SimdLevel::avx512_vnni:
            return "avx512vnni";
    }
    return "unknown";
}

std::vector<SimdLevel> supported_simd_levels() {
    std::vector<SimdLevel> levels;
    for (SimdLevel level : kAllLevels)
        if (machine_runs(level)) levels.push_back(level);
    return levels;
}

SimdLevel best_simd_level() { return supported_simd_levels().back(); }

std::optional<SimdLevel> simd_level_named(std::string_view name) {
    for (SimdLevel level : kAllLevels)
        if (name == simd_level_name(level)) return level;
    return std::nullopt;
}

uint8_t* quant_scratch(size_t bytes) {
    thread_local std::vector<uint8_t> buffer;
    if (buffer.size() < bytes) buffer.resize(bytes);
    return buffer.data();
}

const KernelTable& cpu_kernels(SimdLevel level) { return tables_of(level).kernels; }

const BaselineKernelTable& cpu_baseline_kernels(SimdLevel level) { return tables_of(level).baselines; }

}  // namespace kvx::cpu
