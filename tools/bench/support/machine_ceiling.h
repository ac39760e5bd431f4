// The machine's ceilings, measured once when kvx-bench starts: memory read bandwidth, peak FMA and int8 rates at
// every thread count from 1 to omp_get_max_threads(). Every benchmark quotes its GB/s and GFLOP/s as a
// fraction of the ceiling at its own thread count, and the JSON context carries the ceilings themselves.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "cpu/kernels/cpu_kernels.h"
#include "tools/bench/support/fma_peak.h"
#include "tools/bench/support/stream_read.h"

namespace kvx::bench {

struct CeilingOptions {
    size_t read_bytes = default_stream_bytes();  // far beyond any L3, so every pass reads DRAM
    int passes = 11;
    int64_t fma_iterations = kFmaPeakIterations;

    // A rough ceiling in well under a second, even under AddressSanitizer: for smoke tests, not figures.
    static CeilingOptions quick() { return {size_t{8} << 20, 1, int64_t{1} << 16}; }
};

struct MachineCeiling {
    std::vector<ReadCeiling> read;                             // [threads - 1]: each read loop's best GB/s
    std::map<cpu::SimdLevel, std::vector<double>> fma_gflops;  // per supported level, [threads - 1]: GFLOP/s
    std::map<cpu::SimdLevel, std::vector<double>> int8_gops;   // per supported level, [threads - 1]: GOP/s

    // Throws std::out_of_range for a thread count or level that was not measured.
    double read_gbps_at(int threads) const;
    // The peak FMA rate a kernel of `level` is held to: the best level's (machine_ceiling.cpp says why).
    double fma_gflops_at(cpu::SimdLevel level, int threads) const;
    // The same for int8 products (the quantized GEMMs).
    double int8_gops_at(cpu::SimdLevel level, int threads) const;
    // Every figure as (key, value) strings for benchmark::AddCustomContext, e.g.
    // ("kvx_read_GBps_threads_2", "25.1"), ("kvx_read_GBps_avx2_threads_2", "24.0"), ("kvx_peak_fma_GFLOPs_avx2_threads_1", "76.3").
    std::vector<std::pair<std::string, std::string>> context_entries() const;
};

// Measures every ceiling for 1 .. max_threads threads and every supported SIMD level.
MachineCeiling measure_machine_ceiling(const CeilingOptions& options, int max_threads);

}  // namespace kvx::bench
