// kvx-bench's CUDA benchmarks (tools/bench/cuda/bench_*.cpp): registered at start-up, and only when a device is usable,
// so that kvx-bench without a GPU runs its CPU benchmarks as before.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace kvx::cuda {

struct CudaBenchmarks {
    std::string skipped_reason;  // empty when the benchmarks were registered; else why not, one sentence
    // For benchmark::AddCustomContext: kvx_cuda_device (device_description()) and kvx_cuda_copy_GBps (the
    // median device-to-device copy bandwidth, bytes read + written per second, 1e9).
    std::vector<std::pair<std::string, std::string>> context;
};

// When device 0 is usable: measures the copy ceiling (`copy_passes` copies of a `copy_bytes` buffer) and
// registers every CUDA benchmark. Never throws: a failure is the skipped reason.
CudaBenchmarks register_cuda_benchmarks(size_t copy_bytes, int copy_passes);

}  // namespace kvx::cuda
