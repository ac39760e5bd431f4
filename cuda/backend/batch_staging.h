// A ForwardBatch's metadata moved to the device in one copy: the host packs tokens, positions, rows, logit
// rows, attention tiles and every layer group's slots and block tables into one pinned buffer, and a single
// cudaMemcpyAsync moves it to a device buffer of the same layout. The device addresses depend only on the
// batch's shape (StagingShape), so a CUDA graph captured for a shape reads each replay's metadata from the
// same places.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_buffer.h"
#include "engine/runtime/forward_batch.h"

namespace kvx::cuda {

// What fixes the layout: sizes only. table_strides may exceed the batch's (a CUDA graph's bucket); the
// extra entries are -1 and never read, since attention stops at each row's position.
struct StagingShape {
    int32_t n_rows = 0;
    int32_t n_logit_rows = 0;
    int32_t n_tiles = 0;
    int32_t n_seqs = 0;                  // rows of each group's block table
    std::vector<int32_t> table_strides;  // [n_groups]

    bool operator==(const StagingShape&) const = default;
    auto operator<=>(const StagingShape&) const = default;
};

// Device pointers into the staged copy.
struct StagedBatch {
    const int32_t* tokens = nullptr;      // [n_rows]
    const int32_t* positions = nullptr;   // [n_rows]
    const int32_t* row_seq = nullptr;     // [n_rows]
    const int32_t* logit_rows = nullptr;  // [n_logit_rows]
    const AttentionTile* tiles = nullptr; // [n_tiles]
    std::vector<const int64_t*> slots;         // [n_groups] -> [n_rows]
    std::vector<const int32_t*> block_tables;  // [n_groups] -> [n_seqs][table_strides[g]]
};

class BatchStaging {
public:
    BatchStaging() = default;
    ~BatchStaging();
    BatchStaging(const BatchStaging&) = delete;
    BatchStaging& operator=(const BatchStaging&) = delete;

    // Packs the batch as `shape` lays it out and enqueues the copy on `stream`. The pinned buffer is reused
    // by the next call, so the caller synchronises the stream between calls (forward does: it waits for
    // the logits). Returns the device pointers; their addresses change only when the buffers grow
    // (generation() then increases, and graphs captured before must not be replayed).
    StagedBatch stage(const ForwardBatch& batch, std::span<const AttentionTile> tiles, const StagingShape& shape,
                      cudaStream_t stream);
    uint64_t generation() const { return generation_; }

private:
    void reserve(size_t bytes);

    std::byte* pinned_ = nullptr;      // [capacity_] host, page-locked: the copy runs asynchronously
    DeviceBuffer<std::byte> device_;   // [capacity_] the same layout on the device
    size_t capacity_ = 0;
    uint64_t generation_ = 0;
};

}  // namespace kvx::cuda
