// Memory read bandwidth of this machine: the ceiling of a bandwidth-bound decode step (bytes of weights and
// KV read per token). Sums a buffer far larger than the caches with 1 .. N threads, each thread reading its
// own contiguous share, and prints the median of repeated passes. A plain streaming sum without software
// prefetch: kvx's GEMV, which prefetches its rows, can beat it by 10% or so on one thread.
//
//   kvx_read_bandwidth [MiB, default 1024] [passes, default 11]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// Sum of p[0 .. 4096) in 32 independent partial sums (four 8-lane vectors once vectorised), so the latency
// of the adds never limits the reads. Cloned for AVX2 and dispatched at run time: 16-byte loads reach a
// lower figure.
__attribute__((target_clones("avx2", "default"))) double sum_chunk(const float* p) {
    float s[32] = {};
    for (int i = 0; i < 4096; i += 32)
        for (int j = 0; j < 32; ++j) s[j] += p[i + j];
    double total = 0;
    for (float v : s) total += v;
    return total;
}

}  // namespace

int main(int argc, char** argv) {
    const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
    const int passes = argc > 2 ? std::atoi(argv[2]) : 11;
    if (mib == 0 || passes <= 0) {
        std::fprintf(stderr, "usage: kvx_read_bandwidth [MiB > 0] [passes > 0]\n");
        return 2;
    }
    const int64_t chunks = static_cast<int64_t>(mib * 1024 * 1024 / sizeof(float) / 4096);
    std::vector<float> data(static_cast<size_t>(chunks) * 4096, 1.0f);  // touched once: every page mapped
    const int max_threads = omp_get_max_threads();
    for (int threads = 1; threads <= max_threads; ++threads) {
        std::vector<double> gbps;
        double checksum = 0;
        for (int pass = 0; pass < passes; ++pass) {
            const auto start = std::chrono::steady_clock::now();
            double total = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
            for (int64_t chunk = 0; chunk < chunks; ++chunk) total += sum_chunk(data.data() + chunk * 4096);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            checksum += total;
            gbps.push_back(static_cast<double>(data.size() * sizeof(float)) / seconds / 1e9);
        }
        std::sort(gbps.begin(), gbps.end());
        std::printf("read bandwidth, %d thread%s: median %.1f GB/s (min %.1f, max %.1f) over %d passes of %zu MiB "
                    "(checksum %.0f)\n",
                    threads, threads == 1 ? "" : "s", gbps[gbps.size() / 2], gbps.front(), gbps.back(), passes, mib,
                    checksum);
    }
    return 0;
}
