// A pool of fixed-size KV blocks identified by int32 ids: a reference count per block, a free list, and a
// least-recently-used list of cached blocks.
//
// The pool knows nothing about layers, tokens or memory: one block id names the same slot range in every
// layer's K and V storage of its layer group (the backend owns that memory). Every block is in exactly one
// of three states:
//
//   used    ref count > 0, held by at least one block table
//   cached  ref count 0, contents still findable by the prefix index (engine/cache/prefix_index.h); kept until
//           the free list runs dry, then taken back least recently used first
//   free    ref count 0, contents meaningless
//
//           allocate (free list first)               release to 0 (registered contents)
//   free ──────────────────────────────▶  used  ─────────────────────────────────────▶ cached
//     ▲                                   │  ▲                                          │  │
//     └── release to 0 (no registration) ─┘  └─────── reuse (a prefix hit) ────────────┘  │
//                                        used ◀── allocate with an empty free list: evict ─┘
//
// The LRU list is doubly linked through block ids, so insert, remove and touch are O(1):
//
//   oldest ─▶ 7 ◀─▶ 3 ◀─▶ 12 ◀─ newest        allocate() with no free block evicts 7
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
    int32_t num_cached() const { return num_cached_; }
    int32_t num_available() const { return num_free() + num_cached(); }  // what allocate() can still hand out
    int32_t num_used() const { return num_blocks() - num_available(); }
    int32_t ref_count(int32_t id) const { return ref_counts_.at(static_cast<size_t>(id)); }
    bool is_cached(int32_t id) const { return in_lru_.at(static_cast<size_t>(id)) != 0; }

    // Takes a free block, or when there is none evicts the least recently used cached one, and gives it a
    // count of 1. The caller forgets an evicted block's registration. Precondition: num_available() > 0
    // (callers check first so that multi-block operations are all-or-nothing).
    int32_t allocate();
    void retain(int32_t id);  // one more holder of a used block
    void reuse(int32_t id);   // a cached block becomes used again with a count of 1 (a prefix hit)
    // One holder fewer. At 0 the block becomes cached when keep_cached (its contents are registered), else
    // free. A block released to cached is the newest in the LRU list.
    void release(int32_t id, bool keep_cached);
    void touch(int32_t id);  // a cached block becomes the newest: a prefix lookup walked through it

    // For the invariant checker and tests.
    const std::vector<int32_t>& free_ids() const { return free_ids_; }
    std::vector<int32_t> lru_order() const;  // cached ids, oldest first
    // Throws kvx::Error if the free list or the LRU list is inconsistent with the ref counts: every block
    // with count 0 is in exactly one of them, once, and no used block is in either.
    void check_invariants() const;

private:
    void lru_push_back(int32_t id);
    void lru_remove(int32_t id);

    std::vector<int32_t> ref_counts_;  // [num_blocks]
    std::vector<int32_t> free_ids_;    // stack of free ids; the lowest ids are handed out first
    std::vector<int32_t> lru_prev_;    // [num_blocks] older neighbour in the LRU list, -1 at the oldest
    std::vector<int32_t> lru_next_;    // [num_blocks] newer neighbour, -1 at the newest
    std::vector<uint8_t> in_lru_;      // [num_blocks] 1 while cached
    int32_t lru_oldest_ = -1;
    int32_t lru_newest_ = -1;
    int32_t num_cached_ = 0;
};

}  // namespace kvx
