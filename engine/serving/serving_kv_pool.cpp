#include "engine/serving/serving_kv_pool.h"

#include <algorithm>
#include <climits>
#include <string>

#include "engine/cache/kv_cache_manager.h"
#include "engine/runtime/decoder_plan.h"
#include "kernels/error.h"

namespace kvx {

int64_t kv_block_bytes_all_layers(const ModelConfig& config, int32_t block_size, KvDtype kv_dtype) {
    const DecoderPlan plan(config, layer_groups(config.n_layers, 0, {}, 1, 1), block_size, kv_dtype);
    return static_cast<int64_t>(plan.kv().bytes_per_block(0));
}

int32_t serving_kv_pool_blocks(const ModelConfig& config, const ServingKvPoolRequest& request) {
    if (request.kv_blocks > 0) return request.kv_blocks;
    // One sequence of the whole context as the scheduler's admission check counts it (scheduler.cpp: one block
    // more than its tokens fill), so that any request the context allows fits the pool.
    const int64_t per_context = blocks_for(request.context, std::max(request.block_size, 1)) + 1;
    const int64_t bytes = std::max<int64_t>(kv_block_bytes_all_layers(config, request.block_size, request.kv_dtype), 1);
    if (request.kv_memory > 0) {
        const int64_t blocks = request.kv_memory / bytes;
        if (blocks < 1)
            throw Error("a KV memory of " + std::to_string(request.kv_memory) + " bytes holds no KV block of " +
                        std::to_string(bytes) + " bytes");
        return static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX));
    }
    const int64_t wanted =
        std::min(per_context * request.max_seqs, std::max<int64_t>(kDefaultServingKvMemory / bytes, 1));
    return static_cast<int32_t>(std::clamp<int64_t>(wanted, per_context, INT32_MAX));
}

}  // namespace kvx
