#include "tools/bench/cuda/copy_bandwidth.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/device_buffer.h"
#include "tools/bench/cuda/event_timer.h"

namespace kvx::cuda {

CopyBandwidth measure_copy_bandwidth(size_t bytes, int passes) {
    if (passes < 1) throw std::invalid_argument("measure_copy_bandwidth needs at least one pass");
    DeviceBuffer<uint8_t> source(bytes);       // [bytes], contents irrelevant: a copy's speed does not depend on them
    DeviceBuffer<uint8_t> destination(bytes);  // [bytes]
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    CopyBandwidth result;
    try {
        EventTimer timer;
        // The first copy pays for mapping the pages and waking the clocks; it is not counted.
        check(cudaMemcpyAsync(destination.data(), source.data(), bytes, cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync (device to device)");
        for (int pass = 0; pass < passes; ++pass) {
            timer.start(stream);
            check(cudaMemcpyAsync(destination.data(), source.data(), bytes, cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync (device to device)");
            const double seconds = timer.stop_and_wait(stream);
            result.gbps.push_back(2.0 * static_cast<double>(bytes) / seconds / 1e9);
        }
    } catch (...) {
        cudaStreamDestroy(stream);
        throw;
    }
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    std::sort(result.gbps.begin(), result.gbps.end());
    return result;
}

}  // namespace kvx::cuda
