// kvx-bench: every CPU kernel's speed against the machine's ceilings, in Google Benchmark's console and
// JSON formats (the benchmarks themselves are tools/bench/cpu/ and tools/bench/engine/), and, in a build
// with CUDA and where a device is usable, every CUDA kernel's against the device's copy bandwidth
// (tools/bench/cuda/).
//
//   kvx-bench [--simd LEVEL] [--ceiling_mib N] [--ceiling_passes N] [--ceiling_quick] [Google Benchmark flags]
//
//   --simd LEVEL        portable, avx2, avx512 or avx512vnni (default: KVX_SIMD, else the best this machine runs)
//   --ceiling_mib N     MiB streamed to measure the read bandwidth, and copied to measure the device's
//                       (default max(1024, 8 x L3): far beyond the L3 and the L2)
//   --ceiling_passes N  passes per ceiling figure (default 11): the CPU read ceiling keeps the best pass of
//                       the best read loop (stream_read.h), the FMA and int8 peaks their best pass, the device
//                       copy its median
//   --ceiling_quick     a rough ceiling in well under a second (8 MiB, 1 pass, short FMA runs): smoke tests
//
// The ceilings are measured once at start-up, before any benchmark, and written into the JSON context
// (kvx_read_GBps_threads_T and each loop's kvx_read_GBps_LOOP_threads_T, kvx_peak_fma_GFLOPs_LEVEL_threads_T,
// kvx_peak_int8_GOPs_LEVEL_threads_T; kvx_cuda_copy_GBps and kvx_cuda_device).
// Without a usable device kvx-bench says so in one line and runs the CPU benchmarks alone.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cpu/kernels/cpu_kernels.h"
#include "tools/bench/support/bench_support.h"
#include "tools/bench/support/machine_ceiling.h"
#if KVX_WITH_CUDA
#include "tools/bench/cuda/cuda_benchmarks.h"
#endif

namespace {

using kvx::cpu::SimdLevel;

struct Options {
    std::string simd;  // empty: KVX_SIMD or the best level
    kvx::bench::CeilingOptions ceiling;
};

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "kvx-bench: %s\n", message.c_str());
    std::exit(2);
}

long positive_number(const std::string& flag, const std::string& text) {
    char* end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value <= 0) fail(flag + " needs a positive whole number, not '" + text + "'");
    return value;
}

// Takes kvx-bench's own flags (--flag VALUE or --flag=VALUE) out of argv, leaving Google Benchmark's.
Options take_own_flags(int& argc, char** argv) {
    Options options;
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        std::string value;
        auto is_flag = [&](std::string_view flag) {
            if (arg == flag) {
                if (i + 1 >= argc) fail(std::string(flag) + " needs a value");
                value = argv[++i];
                return true;
            }
            if (arg.size() > flag.size() && arg.substr(0, flag.size()) == flag && arg[flag.size()] == '=') {
                value = std::string(arg.substr(flag.size() + 1));
                return true;
            }
            return false;
        };
        if (arg == "--ceiling_quick") {
            options.ceiling = kvx::bench::CeilingOptions::quick();
        } else if (is_flag("--simd")) {
            options.simd = value;
        } else if (is_flag("--ceiling_mib")) {
            options.ceiling.read_bytes = static_cast<size_t>(positive_number("--ceiling_mib", value)) << 20;
        } else if (is_flag("--ceiling_passes")) {
            options.ceiling.passes = static_cast<int>(positive_number("--ceiling_passes", value));
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    return options;
}

// --simd names the level; without it KVX_SIMD decides as it does for kvx itself (unset, empty or "auto": the
// best level this machine runs).
SimdLevel chosen_level(std::string simd) {
    if (simd.empty())
        if (const char* env = std::getenv("KVX_SIMD")) simd = env;
    if (simd.empty() || simd == "auto") return kvx::cpu::best_simd_level();
    const std::optional<SimdLevel> level = kvx::cpu::simd_level_named(simd);
    if (!level) fail("unknown SIMD level '" + simd + "' (use auto, avx512vnni, avx512, avx2 or portable)");
    try {
        kvx::cpu::cpu_kernels(*level);  // throws when this machine cannot run it
    } catch (const std::exception& e) {
        fail(e.what());
    }
    return *level;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = take_own_flags(argc, argv);
    const SimdLevel level = chosen_level(options.simd);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

    const int max_threads = omp_get_max_threads();
    std::fprintf(stderr, "kvx-bench: measuring the machine's ceilings (%zu MiB read, %d passes, 1..%d threads)\n",
                 options.ceiling.read_bytes >> 20, options.ceiling.passes, max_threads);
    kvx::bench::MachineCeiling ceiling = kvx::bench::measure_machine_ceiling(options.ceiling, max_threads);
    std::vector<std::pair<std::string, std::string>> context = ceiling.context_entries();
#if KVX_WITH_CUDA
    const kvx::cuda::CudaBenchmarks cuda = kvx::cuda::register_cuda_benchmarks(options.ceiling.read_bytes, options.ceiling.passes);
    if (!cuda.skipped_reason.empty()) std::fprintf(stderr, "CUDA benchmarks skipped: %s\n", cuda.skipped_reason.c_str());
    context.insert(context.end(), cuda.context.begin(), cuda.context.end());
#endif
    for (const auto& [key, value] : context) {
        benchmark::AddCustomContext(key, value);
        std::fprintf(stderr, "  %s = %s\n", key.c_str(), value.c_str());
    }
    benchmark::AddCustomContext("kvx_simd_level", kvx::cpu::simd_level_name(level));
    benchmark::AddCustomContext("kvx_ceiling_read_mib", std::to_string(options.ceiling.read_bytes >> 20));
    kvx::bench::set_level_under_test(level);
    kvx::bench::set_machine_ceiling(std::move(ceiling));

    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
