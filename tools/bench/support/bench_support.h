// What every kvx-bench benchmark shares: the kernel table under test, the thread counts it runs at, the
// counters it reports against the machine's ceilings, and its input data.
//
// Every benchmark takes the OpenMP thread count as its first argument ("threads"), runs on the real-time
// clock (the kernels' OpenMP workers do not show in the calling thread's CPU time) and reports, per call:
//   bytes, flops                        what one call moves to and from memory and computes
//   GB/s, GFLOP/s                       those per second
//   frac_of_read_bw, frac_of_peak_fma   those rates over the machine's ceilings at the same thread count
//   (frac_of_peak_int8)                 (for int8 products, instead of frac_of_peak_fma)
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "cpu/kernels/cpu_kernels.h"
#include "tools/bench/support/machine_ceiling.h"

namespace kvx::bench {

// Set once by kvx-bench's main, before any benchmark runs.
void set_level_under_test(cpu::SimdLevel level);
void set_machine_ceiling(MachineCeiling ceiling);

cpu::SimdLevel level_under_test();
const KernelTable& kernels_under_test();
const BaselineKernelTable& baseline_kernels_under_test();  // the same level's (kernels/baseline_kernels.h)

// 1 and omp_get_max_threads() (the core count unless OMP_NUM_THREADS says otherwise), without repeats.
std::vector<int64_t> thread_counts();

// {k, m} of the matrices the matmul benchmarks run: SmolLM2-135M's (dim 576, kv 192, hidden 1536, vocab 49152),
// then a 1B-class model's (dim 2048, kv 512, hidden 8192).
const std::vector<std::pair<int64_t, int64_t>>& matrix_shapes();
// A prefill over every matrix_shapes() entry: arguments threads, n (32, a chunk; 512, a prompt), k, m.
void prefill_shapes(benchmark::internal::Benchmark* b);

// The argument lists of a sweep: every combination of `lists` (first entry: the thread counts), named,
// that `keep` accepts (all when it is empty; it bounds the memory of the largest products). Also puts the
// benchmark on the real-time clock in microseconds.
void sweep(benchmark::internal::Benchmark* b, const std::vector<const char*>& names,
           const std::vector<std::vector<int64_t>>& lists,
           const std::function<bool(const std::vector<int64_t>&)>& keep = {});

// Sets the OpenMP thread count for the kernels from the "threads" argument (range 0); returns it.
int use_threads(const benchmark::State& state);

// What a benchmark's flops are: fp32 multiply-adds (held to the peak FMA rate, frac_of_peak_fma) or int8
// products (the quantized matmuls; held to the peak int8 rate, frac_of_peak_int8).
enum class Products { fp32, int8 };

// Counters for one call that moves `bytes` and computes `flops` (either may be 0: its counters are left out).
void report_per_call(benchmark::State& state, double bytes, double flops, Products products = Products::fp32);

// The bytes of a rotation of copies of a matrix, each call reading the next, that no cache holds: so that a
// GEMV's GB/s is against DRAM, the figure a decode step lives by. 256 MiB or twice the L3, whichever is
// larger (some servers' L3 is 480 MiB: 256 MiB copies were read from it at up to 1.15x the DRAM ceiling).
// $KVX_BENCH_ROTATION_BYTES overrides it (a size that fits a cache shows a kernel's speed without DRAM).
size_t rotation_bytes();

// Uniform pseudo-random values in [-1, 1), the same for the same seed, filled on every thread (gigabytes of
// KV cache fill in a second or two rather than a minute).
void fill_random(std::span<float> out, uint64_t seed);
void fill_random_f16(std::span<uint16_t> out, uint64_t seed);

// Google Benchmark calls a benchmark function several times with the same arguments (growing iteration
// counts while it calibrates, then each repetition). The data of the last call is kept and handed back
// while the key (the sizes) stays the same; a new key frees the old data before making the new, so at
// most one set per Data type is alive.
template <class Data, class Key, class Make>
Data& reuse_or_make(const Key& key, Make make) {
    static std::optional<std::pair<Key, Data>> kept;
    if (!kept || kept->first != key) {
        kept.reset();
        kept.emplace(key, make());
    }
    return kept->second;
}

}  // namespace kvx::bench
