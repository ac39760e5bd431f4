#include "tools/bench/cuda/event_timer.h"

#include "cuda/kernels/cuda_check.h"

namespace kvx::cuda {

EventTimer::EventTimer() {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    const cudaError_t status = cudaEventCreate(&stop_);
    if (status != cudaSuccess) {
        cudaEventDestroy(start_);
        check(status, "cudaEventCreate");
    }
}

EventTimer::~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
}

void EventTimer::start(cudaStream_t stream) { check(cudaEventRecord(start_, stream), "cudaEventRecord"); }

double EventTimer::stop_and_wait(cudaStream_t stream) {
    check(cudaEventRecord(stop_, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float milliseconds = 0;
    check(cudaEventElapsedTime(&milliseconds, start_, stop_), "cudaEventElapsedTime");
    return static_cast<double>(milliseconds) * 1e-3;
}

}  // namespace kvx::cuda
