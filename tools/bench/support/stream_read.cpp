#include "tools/bench/support/stream_read.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVX_STREAM_AVX2 1
#endif

namespace kvx::bench {
namespace {

// Work is split and summed in chunks of 16 KB: 64 AVX2 iterations of 256 bytes each.
constexpr size_t kStreamChunkFloats = 4096;
constexpr size_t kHugePageBytes = size_t{2} << 20;

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
// (AMD EPYC Zen 3, 1 GiB; 1 KB and 4 KB ahead gained less than 512 B).
constexpr size_t kPrefetchAheadFloats = 512 / sizeof(float);

// Sum of `chunks` consecutive chunks from p: eight 32-byte loads per iteration into eight independent
// accumulators, so neither the add latency (3-4 cycles) nor a dependency limits how many loads are in
// flight; only the memory system does. Prefetches past the buffer's end are harmless hints.
__attribute__((target("avx2"))) double sum_chunks_avx2(const float* p, size_t chunks) {
    __m256 acc[8];  // [8] accumulators, one per 32-byte load of a 256-byte step
    for (__m256& a : acc) a = _mm256_setzero_ps();
    const float* end = p + chunks * kStreamChunkFloats;
    for (; p < end; p += 64) {
        for (size_t line = 0; line < 64; line += 16)
            _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAheadFloats + line), _MM_HINT_T0);
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
#endif

double sum_chunks(const float* p, size_t chunks) {
#ifdef KVX_STREAM_AVX2
    static const bool has_avx2 = __builtin_cpu_supports("avx2");
    if (has_avx2) return sum_chunks_avx2(p, chunks);
#endif
    double total = 0;
    for (size_t c = 0; c < chunks; ++c) total += sum_chunk_portable(p + c * kStreamChunkFloats);
    return total;
}

}  // namespace

StreamBuffer::StreamBuffer(size_t bytes) {
    floats_ = std::max<size_t>(1, bytes / sizeof(float) / kStreamChunkFloats) * kStreamChunkFloats;
    const size_t allocated = (floats_ * sizeof(float) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    data_ = static_cast<float*>(std::aligned_alloc(kHugePageBytes, allocated));
    if (data_ == nullptr) throw std::bad_alloc();
    madvise(data_, allocated, MADV_HUGEPAGE);  // advice only: without huge pages the read is merely slower
    std::fill(data_, data_ + floats_, 1.0f);
}

StreamBuffer::~StreamBuffer() { std::free(data_); }

ReadBandwidth measure_read_bandwidth(const StreamBuffer& buffer, int threads, int passes) {
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
            total += sum_chunks(buffer.data() + begin * kStreamChunkFloats, end - begin);
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (pass < 0) continue;
        result.checksum += total;
        result.gbps.push_back(static_cast<double>(buffer.bytes()) / seconds / 1e9);
    }
    std::sort(result.gbps.begin(), result.gbps.end());
    return result;
}

}  // namespace kvx::bench
