// The memory read ceiling: how fast this machine can stream a buffer far larger than its caches into the
// cores, the denominator of every bandwidth-bound kernel's figure (a decode step reads each weight and
// each K/V row once). Shared by kvx_read_bandwidth and kvx-bench's machine ceiling.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "cpu/backend/huge_page_buffer.h"

namespace kvx::bench {

// A buffer of floats in huge pages, as the engine's weights are (fewer TLB misses, so the read measures DRAM
// rather than page walks), and touched once so every page is mapped.
class StreamBuffer {
public:
    explicit StreamBuffer(size_t bytes);

    float* data() const { return reinterpret_cast<float*>(memory_.data()); }  // [floats()], all 1.0f
    size_t floats() const { return floats_; }
    size_t bytes() const { return floats_ * sizeof(float); }

private:
    size_t floats_;  // a multiple of kStreamChunkFloats (stream_read.cpp)
    cpu::HugePageBuffer memory_;
};

struct ReadBandwidth {
    std::vector<double> gbps;  // one figure per pass, ascending
    double checksum = 0;       // the sum of everything read, so no pass can be optimised away

    double median() const { return gbps[gbps.size() / 2]; }
    double min() const { return gbps.front(); }
    double max() const { return gbps.back(); }
};

// The loops a read can be measured with. No single one is fastest everywhere (software prefetch helped on
// one Zen 3 and cost on others, issue 14), so a ceiling is the best of all that the CPU runs.
enum class ReadLoop {
    portable,       // 32 scalar partial sums, for CPUs without AVX2
    avx2,           // eight independent 32-byte accumulators
    avx2_prefetch,  // the same with a software prefetch 512 B ahead
    avx2_prefetch_far,  // the same with the CPU GEMV's prefetch: 32 KB ahead, into L2
    avx512,         // four independent 64-byte accumulators
};
const char* read_loop_name(ReadLoop loop);
std::vector<ReadLoop> supported_read_loops();  // on this CPU, portable first

// A buffer size that no cache holds: 1 GiB or eight times the L3, whichever is larger.
size_t default_stream_bytes();

// `passes` (>= 1) reads of the whole buffer on `threads` OpenMP threads, each reading its own contiguous
// share, in GB/s (1e9 bytes per second).
ReadBandwidth measure_read_bandwidth(const StreamBuffer& buffer, int threads, int passes, ReadLoop loop);

// The read ceiling at one thread count: every supported loop's best pass, and the best of those. The best
// pass, not the median, because the question is what the memory system can deliver; a busy neighbour only
// ever lowers a pass.
struct ReadCeiling {
    std::vector<std::pair<ReadLoop, double>> by_loop;  // [supported loops]: best GB/s of each
    double best_gbps = 0;
    ReadLoop best_loop = ReadLoop::portable;
};
ReadCeiling measure_read_ceiling(const StreamBuffer& buffer, int threads, int passes);

}  // namespace kvx::bench
