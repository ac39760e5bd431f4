#include "tools/bench/support/bench_support.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "kernels/f16.h"

namespace kvx::bench {
namespace {

std::optional<cpu::SimdLevel> g_level;        // set by main
std::optional<MachineCeiling> g_ceiling;      // set by main

// splitmix64: a full-period 64-bit mix, cheap enough to fill memory at its write speed.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

float uniform(uint64_t seed, size_t i) {
    return static_cast<float>(mix(seed * 0x100000001b3ull + i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace

void set_level_under_test(cpu::SimdLevel level) { g_level = level; }
void set_machine_ceiling(MachineCeiling ceiling) { g_ceiling = std::move(ceiling); }

cpu::SimdLevel level_under_test() {
    if (!g_level) throw std::logic_error("kvx-bench: the SIMD level is chosen in main before benchmarks run");
    return *g_level;
}

const KernelTable& kernels_under_test() { return cpu::cpu_kernels(level_under_test()); }

const BaselineKernelTable& baseline_kernels_under_test() { return cpu::cpu_baseline_kernels(level_under_test()); }

std::vector<int64_t> thread_counts() {
    const int64_t all = omp_get_max_threads();
    return all > 1 ? std::vector<int64_t>{1, all} : std::vector<int64_t>{1};
}

void sweep(benchmark::internal::Benchmark* b, const std::vector<const char*>& names,
           const std::vector<std::vector<int64_t>>& lists,
           const std::function<bool(const std::vector<int64_t>&)>& keep) {
    b->ArgNames(std::vector<std::string>(names.begin(), names.end()));
    // Every combination, the last list varying fastest (odometer order).
    std::vector<size_t> at(lists.size(), 0);
    for (;;) {
        std::vector<int64_t> args;
        for (size_t i = 0; i < lists.size(); ++i) args.push_back(lists[i][at[i]]);
        if (!keep || keep(args)) b->Args(args);
        size_t i = lists.size();
        while (i > 0 && ++at[i - 1] == lists[i - 1].size()) at[--i] = 0;
        if (i == 0) break;
    }
    b->UseRealTime();
    b->Unit(benchmark::kMicrosecond);
}

int use_threads(const benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    omp_set_num_threads(threads);
    return threads;
}

const std::vector<std::pair<int64_t, int64_t>>& matrix_shapes() {
    static const std::vector<std::pair<int64_t, int64_t>> shapes = {
        {576, 576},   {576, 192},  {576, 1536},  {1536, 576}, {576, 49152},
        {2048, 2048}, {2048, 512}, {2048, 8192}, {8192, 2048},
    };
    return shapes;
}

void prefill_shapes(benchmark::internal::Benchmark* b) {
    for (const auto& [k, m] : matrix_shapes()) sweep(b, {"threads", "n", "k", "m"}, {thread_counts(), {32, 512}, {k}, {m}});
}

void report_per_call(benchmark::State& state, double bytes, double flops, Products products) {
    using benchmark::Counter;
    if (!g_ceiling) throw std::logic_error("kvx-bench: the machine ceiling is measured in main before benchmarks run");
    const int threads = static_cast<int>(state.range(0));
    // kIsIterationInvariantRate: the value times the iterations, over the elapsed (real) time.
    if (bytes > 0) {
        state.counters["bytes"] = bytes;
        state.counters["GB/s"] = Counter(bytes / 1e9, Counter::kIsIterationInvariantRate);
        state.counters["frac_of_read_bw"] =
            Counter(bytes / (g_ceiling->read_gbps_at(threads) * 1e9), Counter::kIsIterationInvariantRate);
    }
    if (flops > 0) {
        state.counters["flops"] = flops;
        state.counters["GFLOP/s"] = Counter(flops / 1e9, Counter::kIsIterationInvariantRate);
        const bool int8 = products == Products::int8;
        const double peak = int8 ? g_ceiling->int8_gops_at(level_under_test(), threads)
                                 : g_ceiling->fma_gflops_at(level_under_test(), threads);
        state.counters[int8 ? "frac_of_peak_int8" : "frac_of_peak_fma"] =
            Counter(flops / (peak * 1e9), Counter::kIsIterationInvariantRate);
    }
}

size_t rotation_bytes() {
    // KVX_BENCH_ROTATION_BYTES (any size, e.g. one that fits L2) shows a kernel's speed with its weights in a
    // cache: whether a GEMV short of the DRAM ceiling is waiting for memory or for its own instructions.
    if (const char* bytes = std::getenv("KVX_BENCH_ROTATION_BYTES")) return static_cast<size_t>(std::strtoull(bytes, nullptr, 10));
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);  // 0 or -1 where the C library does not know
    return std::max(size_t{256} << 20, l3 > 0 ? size_t{2} * static_cast<size_t>(l3) : 0);
}

void fill_random(std::span<float> out, uint64_t seed) {
    const int64_t n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = uniform(seed, static_cast<size_t>(i));
}

void fill_random_f16(std::span<uint16_t> out, uint64_t seed) {
    const int64_t n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
        out[static_cast<size_t>(i)] = f32_to_f16(uniform(seed, static_cast<size_t>(i)));
}

}  // namespace kvx::bench
