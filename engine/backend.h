// What the engine needs from a compute backend: KV storage for the block pool, block copies for
// copy-on-write, and the model's forward pass over a ForwardBatch. The host-kernel backend
// (models/decoder_host.h) serves every CPU KernelTable, the reference one included; a CUDA backend
// implements the same interface over device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/forward_batch.h"
#include "engine/kv_cache_manager.h"

namespace kvx {

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;

    // Allocates K/V storage for num_blocks blocks of block_size tokens, in every layer. Called once.
    virtual void allocate_kv(int32_t num_blocks, int32_t block_size) = 0;
    // Bytes of K/V storage one block occupies over all layers.
    virtual size_t kv_bytes_per_block() const = 0;
    // Performs copy-on-write copies recorded by the cache manager, all layers, K and V.
    virtual void copy_blocks(const std::vector<BlockCopy>& copies) = 0;

    // Runs the model over the batch: appends every row's K/V at its slot, then writes the logits of the
    // rows in batch.logit_rows to logits [logit_rows.size()][vocab_size].
    virtual void forward(const ForwardBatch& batch, float* logits) = 0;
};

}  // namespace kvx
