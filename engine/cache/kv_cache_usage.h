// How one KV block pool is spent, in blocks and bytes: what a CLI prints and what tests check. A model
// with several layer groups has one pool, hence one of these, per group.
//
//   blocks_total = in_use + cached + free
//   in_use  ref count > 0; shared (ref count > 1) is a part of it
//   cached  ref count 0, kept for prefix reuse until the pool needs them (LRU)
//   wasted  slots, not blocks: the unused tail of partly filled blocks in use, each block counted once
//           however many tables hold it
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvx {

struct KvCacheUsage {
    int32_t block_size = 0;        // tokens per block
    size_t bytes_per_block = 0;    // K and V of every layer the pool serves; 0 when the caller did not say
    int32_t blocks_total = 0;
    int32_t blocks_in_use = 0;
    int32_t blocks_shared = 0;
    int32_t blocks_cached = 0;
    int32_t blocks_free = 0;
    int64_t slots_wasted = 0;

    size_t bytes(int64_t blocks) const { return static_cast<size_t>(blocks) * bytes_per_block; }
    size_t bytes_total() const { return bytes(blocks_total); }
    size_t bytes_in_use() const { return bytes(blocks_in_use); }
    size_t bytes_shared() const { return bytes(blocks_shared); }
    size_t bytes_cached() const { return bytes(blocks_cached); }
    size_t bytes_wasted() const {
        return block_size > 0 ? static_cast<size_t>(slots_wasted) * bytes_per_block / static_cast<size_t>(block_size) : 0;
    }
};

}  // namespace kvx
