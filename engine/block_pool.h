// A pool of fixed-size KV blocks identified by int32 ids, with a reference count per block.
//
// The pool knows nothing about layers, tokens or memory: one block id names the same slot range in every
// layer's K and V storage (the backend owns that memory). A block is free exactly when its count is 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvx {

class BlockPool {
public:
    explicit BlockPool(int32_t num_blocks);

    int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
    int32_t num_free() const { return static_cast<int32_t>(free_ids_.size()); }
    int32_t num_used() const { return num_blocks() - num_free(); }
    int32_t ref_count(int32_t id) const { return ref_counts_.at(static_cast<size_t>(id)); }

    // Takes a free block and gives it a count of 1. Precondition: num_free() > 0 (callers check first so
    // that multi-block operations are all-or-nothing).
    int32_t allocate();
    void retain(int32_t id);   // one more holder of a used block
    void release(int32_t id);  // one holder fewer; the block is free again at 0

    // The free list, for the invariant checker.
    const std::vector<int32_t>& free_ids() const { return free_ids_; }

private:
    std::vector<int32_t> ref_counts_;  // [num_blocks]
    std::vector<int32_t> free_ids_;    // stack of free ids; the lowest ids are handed out first
};

}  // namespace kvx
