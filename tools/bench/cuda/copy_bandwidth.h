// The device's memory ceiling: how fast one device-to-device copy moves a buffer far larger than the L2
// cache. Every CUDA benchmark quotes its bytes per second as a fraction of it (a decode step's kernels read
// each weight and each K/V row once, so they are bound by the same memory). Shared by kvx-bench's CUDA
// benchmarks and kvx_cuda_decode, so both quote the same ceiling.
#pragma once

#include <cstddef>
#include <vector>

namespace kvx::cuda {

struct CopyBandwidth {
    std::vector<double> gbps;  // one figure per pass, ascending: bytes read + bytes written per second, 1e9

    double median() const { return gbps[gbps.size() / 2]; }
};

// `passes` (>= 1) timed cudaMemcpyAsync copies of a `bytes`-long device buffer into another, after one
// untimed copy. Device 0 must be usable (device_probe.h); throws kvx::Error when the buffers do not fit.
CopyBandwidth measure_copy_bandwidth(size_t bytes, int passes);

}  // namespace kvx::cuda
