// How many KV blocks a server's pool gets: asked for in blocks, else in bytes, else enough for max_seqs
// sequences of the whole context within kDefaultServingKvMemory, and never less than one sequence of the whole
// context. The sizes a block takes come from the DecoderPlan, so the answer follows the model and the KV dtype.
#pragma once

#include <cstdint>

#include "engine/model/model_config.h"
#include "kernels/kernels.h"

namespace kvx {

constexpr int64_t kDefaultServingKvMemory = int64_t{1} << 30;  // 1 GiB

struct ServingKvPoolRequest {
    int32_t context = 0;              // tokens one sequence may hold (resolved: not 0)
    int32_t block_size = 16;          // tokens per block
    KvDtype kv_dtype = KvDtype::f32;
    int32_t max_seqs = 1;             // sequences the scheduler runs at once
    int32_t kv_blocks = 0;            // the pool in blocks; > 0 wins over everything else
    int64_t kv_memory = 0;            // the pool in bytes; > 0 wins over the default
};

// The KV bytes of one block with every layer counted: a windowed layer group's pool is sized from the full
// group's, so this is the bytes per block of one group that holds every layer.
int64_t kv_block_bytes_all_layers(const ModelConfig& config, int32_t block_size, KvDtype kv_dtype);

// The pool's size in blocks. Throws kvx::Error when kv_memory holds no block.
int32_t serving_kv_pool_blocks(const ModelConfig& config, const ServingKvPoolRequest& request);

}  // namespace kvx
