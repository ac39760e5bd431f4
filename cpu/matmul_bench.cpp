// Decode GEMV speed of matmul (fp32 weights) and matmul_f16 (fp16 weights), in GB/s of weights read, next
// to the ceiling: a plain streaming read of as many bytes as the fp16 matrix.
//
//   build/bin/kvx_matmul_bench [--simd LEVEL] [--calls N]
//
// A decode step reads every weight of the model once, from DRAM (a 135M-parameter model is 270 MB in fp16),
// so the "cold" figures are the ones that predict decode speed: each call reads a different copy of the
// matrix, from a rotation of copies that together are 8x the L3 cache. "hot" repeats one matrix that fits
// in the cache. Every figure is the median over the calls, on omp_get_max_threads() threads (OMP_NUM_THREADS).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "kernels/f16.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kRotationBytes = size_t{256} << 20;  // > 8x a 32 MB L3: every cold call reads from DRAM

struct Shape {
    const char* what;
    int k;  // in_features
    int m;  // out_features
};

// SmolLM2-135M's decode matrices (dim 576, hidden 1536, vocab 49152).
constexpr Shape kShapes[] = {
    {"gate/up 576 -> 1536", 576, 1536},
    {"down 1536 -> 576", 1536, 576},
    {"classifier 576 -> 49152", 576, 49152},
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// copies of one [m][k] matrix of W, filled with random weights; as many as make `bytes` (at least 1).
template <class W>
std::vector<std::vector<W>> weight_copies(const Shape& s, size_t bytes) {
    const size_t n = static_cast<size_t>(s.m) * static_cast<size_t>(s.k);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<W> w(n);
    for (W& v : w) {
        if constexpr (std::is_same_v<W, float>) {
            v = dist(rng);
        } else {
            v = kvx::f32_to_f16(dist(rng));
        }
    }
    const size_t copies = std::max<size_t>(1, bytes / (n * sizeof(W)));
    return std::vector<std::vector<W>>(copies, w);
}

// One matrix shape's three measurements, taken in turns (f32 GEMV, f16 GEMV, streaming read, f32, ...) so
// that all three see the same machine when other work comes and goes. GB/s of the bytes each one reads.
struct Rates {
    std::vector<double> f32, f16, read;
};

Rates measure(const kvx::KernelTable& kernels, const Shape& s, bool cold, int calls) {
    const size_t rotation = cold ? kRotationBytes : 0;
    const auto w32 = weight_copies<float>(s, rotation);
    const auto w16 = weight_copies<uint16_t>(s, rotation);
    // The read covers the f16 matrix's bytes as 32-bit integers, summed (the compiler vectorises it).
    const size_t read_n = w16[0].size() / 2;
    const std::vector<std::vector<uint32_t>> reads(w16.size(), std::vector<uint32_t>(read_n, 1u));
    std::vector<float> x(static_cast<size_t>(s.k), 0.5f), out(static_cast<size_t>(s.m));  // [k], [m]
    const int threads = omp_get_max_threads();

    Rates rates;
    uint32_t sink = 0;
    auto timed = [](std::vector<double>& into, bool keep, double bytes, auto run) {
        const Clock::time_point start = Clock::now();
        run();
        if (keep) into.push_back(bytes / seconds_since(start) / 1e9);
    };
    for (int call = -1; call < calls; ++call) {  // call -1 warms up the thread team and the caches
        const size_t copy = static_cast<size_t>(call + 1);
        const auto& a = w32[copy % w32.size()];
        const auto& b = w16[copy % w16.size()];
        const uint32_t* r = reads[copy % reads.size()].data();
        timed(rates.f32, call >= 0, static_cast<double>(a.size() * sizeof(float)),
              [&] { kernels.matmul(out.data(), x.data(), a.data(), 1, s.k, s.m); });
        timed(rates.f16, call >= 0, static_cast<double>(b.size() * sizeof(uint16_t)),
              [&] { kernels.matmul_f16(out.data(), x.data(), b.data(), 1, s.k, s.m); });
        timed(rates.read, call >= 0, static_cast<double>(read_n * sizeof(uint32_t)), [&] {
            uint32_t sum = 0;
#pragma omp parallel for reduction(+ : sum) num_threads(threads) schedule(static)
            for (size_t i = 0; i < read_n; ++i) sum += r[i];
            sink += sum;
        });
    }
    if (sink == 0) std::printf("(unexpected sum)\n");  // keeps the sums observable
    return rates;
}

kvx::cpu::SimdLevel level_named(const std::string& name) {
    for (kvx::cpu::SimdLevel level : kvx::cpu::supported_simd_levels())
        if (name == kvx::cpu::simd_level_name(level)) return level;
    std::fprintf(stderr, "kvx_matmul_bench: unknown or unsupported --simd %s\n", name.c_str());
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    kvx::cpu::SimdLevel level = kvx::cpu::best_simd_level();
    int calls = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--simd") == 0) {
            level = level_named(argv[i + 1]);
        } else if (std::strcmp(argv[i], "--calls") == 0) {
            calls = std::max(1, std::atoi(argv[i + 1]));
        }
    }
    const kvx::KernelTable& kernels = kvx::cpu::cpu_kernels(level);
    std::printf("%s, %d threads, median of %d calls; GB/s of the bytes each reads (ceiling: a streaming read)\n",
                kernels.name, omp_get_max_threads(), calls);
    std::printf("%-26s %-5s | %8s %8s %8s | %8s %8s %8s\n", "matrix", "cache", "f32", "f16", "ceiling", "f32 us",
                "f16 us", "f32/f16");
    for (const Shape& s : kShapes) {
        for (bool cold : {false, true}) {
            const Rates r = measure(kernels, s, cold, calls);
            const double f32 = median(r.f32), f16 = median(r.f16);
            const double kb32 = 4e-3 * s.k * s.m, kb16 = 2e-3 * s.k * s.m;  // kB of weights
            std::printf("%-26s %-5s | %8.1f %8.1f %8.1f | %8.1f %8.1f %8.2f\n", s.what, cold ? "cold" : "hot", f32,
                        f16, median(r.read), kb32 / f32, kb16 / f16, (kb32 / f32) / (kb16 / f16));
        }
    }
    return 0;
}
