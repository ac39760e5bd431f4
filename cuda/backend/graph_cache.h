// CUDA graphs of whole forward passes, one per batch shape (StagingShape): a shape seen a second time is
// captured, and every later pass of that shape replays the graph, replacing some 10 kernel launches per
// layer with one. Replays are valid only while every device address the capture baked in is unchanged:
// the caller passes a generation that grows whenever a buffer moves, and graphs of an older generation are
// recaptured.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>

#include "cuda/backend/batch_staging.h"

namespace kvx::cuda {

class GraphCache {
public:
    GraphCache() = default;
    ~GraphCache() { clear(); }
    GraphCache(const GraphCache&) = delete;
    GraphCache& operator=(const GraphCache&) = delete;

    // Runs `enqueue` (which launches the whole pass on `stream`) for a pass of this shape: replays the
    // shape's graph when there is one of this generation, captures one the second time a shape is seen,
    // and otherwise runs enqueue directly.
    void run(const StagingShape& shape, uint64_t generation, cudaStream_t stream, const std::function<void()>& enqueue);

    void clear();
    int64_t replays() const { return replays_; }
    int64_t captures() const { return captures_; }

private:
    struct Entry {
        int seen = 0;
        uint64_t generation = 0;
        cudaGraphExec_t exec = nullptr;
    };
    static constexpr size_t kMaxGraphs = 64;  // each holds device memory for its nodes: bound them

    std::map<StagingShape, Entry> graphs_;
    int64_t replays_ = 0;
    int64_t captures_ = 0;
};

}  // namespace kvx::cuda
