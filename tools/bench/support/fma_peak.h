// The arithmetic ceiling: the peak rate of fused multiply-adds of one SIMD level, the denominator of a
// compute-bound kernel's GFLOP/s.
#pragma once

#include <cstdint>

#include "cpu/kernels/cpu_kernels.h"

namespace kvx::bench {

// GFLOP/s (a multiply-add counts 2) of independent FMA chains at `level`'s vector width on `threads`
// OpenMP threads: the best of `passes` (>= 1) runs of `iterations` steps of every chain per thread
// (kFmaPeakIterations: 10-30 ms at a few GHz, long against a thread team's wake-up). The portable level has no FMA instruction in the
// baseline x86-64 target, so its chains are a multiply then an add on 4-lane vectors, as the compiler
// emits for the portable kernels. Throws std::runtime_error if this machine cannot run `level`.
constexpr int64_t kFmaPeakIterations = int64_t{1} << 23;
double measure_peak_fma_gflops(cpu::SimdLevel level, int threads, int passes,
                               int64_t iterations = kFmaPeakIterations);

// The same for int8 products, the ceiling of the quantized GEMMs: GOP/s (a multiply-add counts 2) of
// independent vpmaddubsw chains (32 byte products a ymm, 64 a zmm, each adding its pair into int16) at
// `level`'s width, the instruction every SIMD level's quantized matmul spends its products in. The portable
// level has none and measures 0: a kernel is held to the best level's figure.
double measure_peak_int8_gops(cpu::SimdLevel level, int threads, int passes, int64_t iterations = kFmaPeakIterations);

}  // namespace kvx::bench
