// Device time between two points of a stream, from a pair of CUDA events: what the GPU spent on the work
// enqueued between start and stop, without the host's launch overhead or its wait.
#pragma once

#include <cuda_runtime_api.h>

namespace kvx::cuda {

class EventTimer {
public:
    EventTimer();
    ~EventTimer();
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;

    void start(cudaStream_t stream);
    // Records the stop event, waits for it and returns the seconds since start.
    double stop_and_wait(cudaStream_t stream);

private:
    cudaEvent_t start_ = nullptr;
    cudaEvent_t stop_ = nullptr;
};

}  // namespace kvx::cuda
