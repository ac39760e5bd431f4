#include "tools/bench/support/stream_read.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVX_STREAM_AVX2 1
#endif

namespace kvx::bench {
namespace {

// Work is split and summed in chunks of 16 KB: 64 AVX2 iterations of 256 bytes each.
constexpr size_t kStreamChunkFloats = 4096;

// Sum of p[0 .. kStreamChunkFloats) in 32 independent partial sums, for machines without AVX2.
double sum_chunk_portable(const float* p) {
    float s[32] = {};  // [32] partial sums, lane j of each 32-float step
    for (size_t i = 0; i < kStreamChunkFloats; i += 32)
        for (size_t j = 0; j < 32; ++j) s[j] += p[i + j];
    double total = 0;
    for (float v : s) total += v;
    return total;
}

#ifdef KVX_STREAM_AVX2
// Software prefetch this far ahead of the loads: the hardware prefetchers alone left one core ~10% short
// (AMD EPYC Zen 3, 1 GiB; 1 KB and 4 KB ahead gained less than 512 B). On other machines the plain loop
// wins (issue 14), which is why the ceiling is the best of every loop rather than this one alone.
constexpr size_t kPrefetchAheadFloats = 512 / sizeof(float);
// The CPU GEMV's own prefetch (cpu/kernels/matmul.inc): 32 KB ahead, into L2. On Zen 4 it lets a 2-thread
// decode read faster than the loops above, which the ceiling must not fall below.
constexpr size_t kFarPrefetchAheadFloats = 32 * 1024 / sizeof(float);

enum class Prefetch { none, near, far };

// Sum of `chunks` consecutive chunks from p: eight 32-byte loads per iteration into eight independent
// accumulators, so neither the add latency (3-4 cycles) nor a dependency limits how many loads are in
// flight; only the memory system does. Prefetches past the buffer's end are harmless hints.
template <Prefetch kPrefetch>
__attribute__((target("avx2"))) double sum_chunks_avx2(const float* p, size_t chunks) {
    __m256 acc[8];  // [8] accumulators, one per 32-byte load of a 256-byte step
    for (__m256& a : acc) a = _mm256_setzero_ps();
    const float* end = p + chunks * kStreamChunkFloats;
    for (; p < end; p += 64) {
        if constexpr (kPrefetch == Prefetch::near)
            for (size_t line = 0; line < 64; line += 16)
                _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAheadFloats + line), _MM_HINT_T0);
        if constexpr (kPrefetch == Prefetch::far)
            for (size_t line = 0; line < 64; line += 16)
                _mm_prefetch(reinterpret_cast<const char*>(p + kFarPrefetchAheadFloats + line), _MM_HINT_T2);
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_load_ps(p + 8 * r));
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])),
                                     _mm256_add_ps(_mm256_add_ps(acc[4], acc[5]), _mm256_add_ps(acc[6], acc[7])));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sum);
    double total = 0;
    for (float v : lanes) total += v;
    return total;
}

// The same read with 64-byte loads, one cache line each: fewer load instructions per byte, which is what
// lifts a core's read rate on machines whose single-core bandwidth is bound by outstanding loads.
__attribute__((target("avx512f"))) double sum_chunks_avx512(const float* p, size_t chunks) {
    __m512 acc[4];  // [4] accumulators, one per 64-byte load of a 256-byte step
    for (__m512& a : acc) a = _mm512_setzero_ps();
    const float* end = p + chunks * kStreamChunkFloats;
    for (; p < end; p += 64)
        for (int r = 0; r < 4; ++r) acc[r] = _mm512_add_ps(acc[r], _mm512_load_ps(p + 16 * r));
    // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps trips -Werror=uninitialized.
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    double total = 0;
    for (float v : lanes) total += v;
    return total;
}
#endif

double sum_chunks(ReadLoop loop, const float* p, size_t chunks) {
    switch (loop) {
#ifdef KVX_STREAM_AVX2
        case ReadLoop::avx2: return sum_chunks_avx2<Prefetch::none>(p, chunks);
        case ReadLoop::avx2_prefetch: return sum_chunks_avx2<Prefetch::near>(p, chunks);
        case ReadLoop::avx2_prefetch_far: return sum_chunks_avx2<Prefetch::far>(p, chunks);
        case ReadLoop::avx512: return sum_chunks_avx512(p, chunks);
#endif
        default: break;
    }
    double total = 0;
    for (size_t c = 0; c < chunks; ++c) total += sum_chunk_portable(p + c * kStreamChunkFloats);
    return total;
}

}  // namespace

StreamBuffer::StreamBuffer(size_t bytes)
    : floats_(std::max<size_t>(1, bytes / sizeof(float) / kStreamChunkFloats) * kStreamChunkFloats),
      memory_(floats_ * sizeof(float)) {
    std::fill(data(), data() + floats_, 1.0f);
}

const char* read_loop_name(ReadLoop loop) {
    switch (loop) {
        case ReadLoop::portable: return "portable";
        case ReadLoop::avx2: return "avx2";
        case ReadLoop::avx2_prefetch: return "avx2_prefetch";
        case ReadLoop::avx2_prefetch_far: return "avx2_prefetch_far";
        case ReadLoop::avx512: return "avx512";
    }
    return "?";
}

std::vector<ReadLoop> supported_read_loops() {
    std::vector<ReadLoop> loops{ReadLoop::portable};
#ifdef KVX_STREAM_AVX2
    if (__builtin_cpu_supports("avx2")) {
        loops.push_back(ReadLoop::avx2);
        loops.push_back(ReadLoop::avx2_prefetch);
        loops.push_back(ReadLoop::avx2_prefetch_far);
    }
    if (__builtin_cpu_supports("avx512f")) loops.push_back(ReadLoop::avx512);
#endif
    return loops;
}

size_t default_stream_bytes() {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);  // 0 or -1 where the C library does not know
    return std::max(size_t{1} << 30, l3 > 0 ? size_t{8} * static_cast<size_t>(l3) : 0);
}

ReadBandwidth measure_read_bandwidth(const StreamBuffer& buffer, int threads, int passes, ReadLoop loop) {
    const size_t chunks = buffer.floats() / kStreamChunkFloats;
    ReadBandwidth result;
    for (int pass = -1; pass < passes; ++pass) {  // pass -1 wakes the thread team and is not counted
        const auto start = std::chrono::steady_clock::now();
        double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const size_t team = static_cast<size_t>(omp_get_num_threads());
            const size_t me = static_cast<size_t>(omp_get_thread_num());
            const size_t begin = chunks * me / team, end = chunks * (me + 1) / team;
            total += sum_chunks(loop, buffer.data() + begin * kStreamChunkFloats, end - begin);
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (pass < 0) continue;
        result.checksum += total;
        result.gbps.push_back(static_cast<double>(buffer.bytes()) / seconds / 1e9);
    }
    std::sort(result.gbps.begin(), result.gbps.end());
    return result;
}

ReadCeiling measure_read_ceiling(const StreamBuffer& buffer, int threads, int passes) {
    ReadCeiling ceiling;
    for (ReadLoop loop : supported_read_loops()) {
        const double best = measure_read_bandwidth(buffer, threads, passes, loop).max();
        ceiling.by_loop.emplace_back(loop, best);
        if (best > ceiling.best_gbps) {
            ceiling.best_gbps = best;
            ceiling.best_loop = loop;
        }
    }
    return ceiling;
}

}  // namespace kvx::bench
