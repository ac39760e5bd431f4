// Memory read bandwidth of this machine: the ceiling of a bandwidth-bound decode step (bytes of weights and
// KV read per token). Streams a buffer far larger than the caches with 1 .. N threads, each thread reading
// its own contiguous share, with every read loop the CPU runs (tools/bench/support/stream_read.h), and
// prints each loop's best pass and the best of all loops: the ceiling. kvx-bench measures its ceiling the
// same way. Scripts parse the output lines (tools/kvx_tools/bench/speed_of_light.py); keep their format.
//
//   kvx_read_bandwidth [MiB, 0 or absent: max(1024, 8 x L3)] [passes, default 11]
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "tools/bench/support/stream_read.h"

int main(int argc, char** argv) {
    using namespace kvx::bench;
    const size_t mib_asked = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 0;
    const size_t bytes = mib_asked > 0 ? mib_asked * 1024 * 1024 : default_stream_bytes();
    const int passes = argc > 2 ? std::atoi(argv[2]) : 11;
    if (passes <= 0) {
        std::fprintf(stderr, "usage: kvx_read_bandwidth [MiB, 0: automatic] [passes > 0]\n");
        return 2;
    }
    const StreamBuffer buffer(bytes);
    const size_t mib = buffer.bytes() >> 20;
    const int max_threads = omp_get_max_threads();
    for (int threads = 1; threads <= max_threads; ++threads) {
        const char* plural = threads == 1 ? "" : "s";
        double best = 0;
        ReadLoop best_loop = ReadLoop::portable;
        for (ReadLoop loop : supported_read_loops()) {
            const ReadBandwidth r = measure_read_bandwidth(buffer, threads, passes, loop);
            std::printf("read loop %s, %d thread%s: best %.1f GB/s (median %.1f, min %.1f) over %d passes of %zu MiB "
                        "(checksum %.0f)\n",
                        read_loop_name(loop), threads, plural, r.max(), r.median(), r.min(), passes, mib, r.checksum);
            if (r.max() > best) best = r.max(), best_loop = loop;
        }
        std::printf("read bandwidth, %d thread%s: best %.1f GB/s (loop %s)\n", threads, plural, best,
                    read_loop_name(best_loop));
        std::fflush(stdout);
    }
    return 0;
}
