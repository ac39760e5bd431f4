// The memory read ceiling: how fast this machine can stream a buffer far larger than its caches into the
// cores, the denominator of every bandwidth-bound kernel's figure (a decode step reads each weight and
// each K/V row once). Shared by kvx_read_bandwidth and kvx-bench's machine ceiling.
#pragma once

#include <cstddef>
#include <vector>

namespace kvx::bench {

// A page-aligned buffer of floats, backed by transparent huge pages where the kernel grants them (fewer
// TLB misses, so the read measures DRAM rather than page walks), and touched once so every page is mapped.
class StreamBuffer {
public:
    explicit StreamBuffer(size_t bytes);
    ~StreamBuffer();
    StreamBuffer(const StreamBuffer&) = delete;
    StreamBuffer& operator=(const StreamBuffer&) = delete;

    const float* data() const { return data_; }
    size_t floats() const { return floats_; }
    size_t bytes() const { return floats_ * sizeof(float); }

private:
    float* data_;   // [floats_], all 1.0f
    size_t floats_;  // a multiple of kStreamChunkFloats (stream_read.cpp)
};

struct ReadBandwidth {
    std::vector<double> gbps;  // one figure per pass, ascending
    double checksum = 0;       // the sum of everything read, so no pass can be optimised away

    double median() const { return gbps[gbps.size() / 2]; }
    double min() const { return gbps.front(); }
    double max() const { return gbps.back(); }
};

// `passes` (>= 1) reads of the whole buffer on `threads` OpenMP threads, each reading its own contiguous
// share, in GB/s (1e9 bytes per second).
ReadBandwidth measure_read_bandwidth(const StreamBuffer& buffer, int threads, int passes);

}  // namespace kvx::bench
