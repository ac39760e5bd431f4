#include "tools/bench/cuda/cuda_benchmarks.h"

#include <cstdio>
#include <exception>

#include "cuda/kernels/device_probe.h"
#include "tools/bench/cuda/bench_timing.h"
#include "tools/bench/cuda/copy_bandwidth.h"

namespace kvx::cuda {

CudaBenchmarks register_cuda_benchmarks(size_t copy_bytes, int copy_passes) {
    CudaBenchmarks result;
    result.skipped_reason = unavailable_reason();
    if (!result.skipped_reason.empty()) return result;
    try {
        const double copy_gbps = measure_copy_bandwidth(copy_bytes, copy_passes).median();
        char figure[32];
        std::snprintf(figure, sizeof figure, "%.1f", copy_gbps);
        result.context = {{"kvx_cuda_device", device_description()}, {"kvx_cuda_copy_GBps", figure}};
        bench::set_copy_ceiling_gbps(copy_gbps);
    } catch (const std::exception& e) {
        result.skipped_reason = e.what();
        return result;
    }
    bench::register_attention_benchmarks();
    bench::register_gemv_benchmarks();
    bench::register_kv_ops_benchmarks();
    return result;
}

}  // namespace kvx::cuda
