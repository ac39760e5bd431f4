#include "tools/bench/support/machine_ceiling.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "tools/bench/support/fma_peak.h"
#include "tools/bench/support/stream_read.h"

namespace kvx::bench {
namespace {

double at_threads(const std::vector<double>& by_threads, int threads, const char* what) {
    if (threads < 1 || static_cast<size_t>(threads) > by_threads.size())
        throw std::out_of_range(std::string(what) + " was not measured at " + std::to_string(threads) + " threads");
    return by_threads[static_cast<size_t>(threads - 1)];
}

std::string figure(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", value);
    return text;
}

// The rate a kernel of `level` is held to: the best of every level's chains at `threads`, not the level's own,
// since a ceiling is never below what some loop on the machine achieves. On Zen 4 the AVX-512 FMA chains ran
// 70 GFLOP/s a core where AVX2's ran 117, and AVX-512 int8 GEMMs held to the former came out above 100%.
double best_of_levels(const std::map<cpu::SimdLevel, std::vector<double>>& rates, cpu::SimdLevel level, int threads,
                      const char* what) {
    if (rates.find(level) == rates.end())
        throw std::out_of_range(std::string(what) + " was not measured for " + cpu::simd_level_name(level));
    double best = 0;
    for (const auto& [measured, by_threads] : rates) best = std::max(best, at_threads(by_threads, threads, what));
    return best;
}

}  // namespace

double MachineCeiling::read_gbps_at(int threads) const {
    if (threads < 1 || static_cast<size_t>(threads) > read.size())
        throw std::out_of_range("read bandwidth was not measured at " + std::to_string(threads) + " threads");
    return read[static_cast<size_t>(threads - 1)].best_gbps;
}

double MachineCeiling::fma_gflops_at(cpu::SimdLevel level, int threads) const {
    return best_of_levels(fma_gflops, level, threads, "peak FMA");
}

double MachineCeiling::int8_gops_at(cpu::SimdLevel level, int threads) const {
    return best_of_levels(int8_gops, level, threads, "peak int8");
}

std::vector<std::pair<std::string, std::string>> MachineCeiling::context_entries() const {
    std::vector<std::pair<std::string, std::string>> entries;
    for (size_t t = 0; t < read.size(); ++t) {
        const std::string threads = "threads_" + std::to_string(t + 1);
        entries.emplace_back("kvx_read_GBps_" + threads, figure(read[t].best_gbps));
        entries.emplace_back("kvx_read_best_loop_" + threads, read_loop_name(read[t].best_loop));
        for (const auto& [loop, gbps] : read[t].by_loop)
            entries.emplace_back(std::string("kvx_read_GBps_") + read_loop_name(loop) + "_" + threads, figure(gbps));
    }
    for (const auto& [level, by_threads] : fma_gflops)
        for (size_t t = 0; t < by_threads.size(); ++t)
            entries.emplace_back(std::string("kvx_peak_fma_GFLOPs_") + cpu::simd_level_name(level) + "_threads_" +
                                     std::to_string(t + 1),
                                 figure(by_threads[t]));
    for (const auto& [level, by_threads] : int8_gops)
        for (size_t t = 0; t < by_threads.size(); ++t)
            entries.emplace_back(std::string("kvx_peak_int8_GOPs_") + cpu::simd_level_name(level) + "_threads_" +
                                     std::to_string(t + 1),
                                 figure(by_threads[t]));
    return entries;
}

MachineCeiling measure_machine_ceiling(const CeilingOptions& options, int max_threads) {
    MachineCeiling ceiling;
    {
        const StreamBuffer buffer(options.read_bytes);
        for (int threads = 1; threads <= max_threads; ++threads)
            ceiling.read.push_back(measure_read_ceiling(buffer, threads, options.passes));
    }
    for (cpu::SimdLevel level : cpu::supported_simd_levels())
        for (int threads = 1; threads <= max_threads; ++threads)
            ceiling.fma_gflops[level].push_back(measure_peak_fma_gflops(level, threads, options.passes, options.fma_iterations));
    for (cpu::SimdLevel level : cpu::supported_simd_levels())
        for (int threads = 1; threads <= max_threads; ++threads)
            ceiling.int8_gops[level].push_back(measure_peak_int8_gops(level, threads, options.passes, options.fma_iterations));
    return ceiling;
}

}  // namespace kvx::bench
