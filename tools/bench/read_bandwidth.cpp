// Memory read bandwidth of this machine: the ceiling of a bandwidth-bound decode step (bytes of weights and
// KV read per token). Streams a buffer far larger than the caches with 1 .. N threads, each thread reading
// its own contiguous share, and prints the median of repeated passes (tools/bench/support/stream_read.h; kvx-bench
// measures its ceiling with the same read). Scripts parse the output lines; keep their format.
//
//   kvx_read_bandwidth [MiB, default 1024] [passes, default 11]
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "tools/bench/support/stream_read.h"

int main(int argc, char** argv) {
    const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
    const int passes = argc > 2 ? std::atoi(argv[2]) : 11;
    if (mib == 0 || passes <= 0) {
        std::fprintf(stderr, "usage: kvx_read_bandwidth [MiB > 0] [passes > 0]\n");
        return 2;
    }
    const kvx::bench::StreamBuffer buffer(mib * 1024 * 1024);
    const int max_threads = omp_get_max_threads();
    for (int threads = 1; threads <= max_threads; ++threads) {
        const kvx::bench::ReadBandwidth r = kvx::bench::measure_read_bandwidth(buffer, threads, passes);
        std::printf("read bandwidth, %d thread%s: median %.1f GB/s (min %.1f, max %.1f) over %d passes of %zu MiB "
                    "(checksum %.0f)\n",
                    threads, threads == 1 ? "" : "s", r.median(), r.min(), r.max(), passes, mib, r.checksum);
    }
    return 0;
}
