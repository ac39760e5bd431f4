#include "engine/cache/block_pool.h"

#include <string>

#include "kernels/error.h"

namespace kvx {

BlockPool::BlockPool(int32_t num_blocks) {
    if (num_blocks <= 0) throw Error("the KV block pool needs at least one block");
    const size_t n = static_cast<size_t>(num_blocks);
    ref_counts_.assign(n, 0);
    lru_prev_.assign(n, -1);
    lru_next_.assign(n, -1);
    in_lru_.assign(n, 0);
    free_ids_.reserve(n);
    for (int32_t id = num_blocks - 1; id >= 0; --id) free_ids_.push_back(id);
}

int32_t BlockPool::allocate() {
    int32_t id;
    if (!free_ids_.empty()) {
        id = free_ids_.back();
        free_ids_.pop_back();
    } else if (lru_oldest_ >= 0) {
        id = lru_oldest_;
        lru_remove(id);
    } else {
        throw Error("internal: BlockPool::allocate on an exhausted pool");
    }
    ref_counts_[static_cast<size_t>(id)] = 1;
    return id;
}

void BlockPool::retain(int32_t id) {
    int32_t& count = ref_counts_.at(static_cast<size_t>(id));
    if (count <= 0) throw Error("internal: retain of unused block " + std::to_string(id));
    ++count;
}

void BlockPool::reuse(int32_t id) {
    if (!is_cached(id)) throw Error("internal: reuse of block " + std::to_string(id) + ", which is not cached");
    lru_remove(id);
    ref_counts_[static_cast<size_t>(id)] = 1;
}

void BlockPool::release(int32_t id, bool keep_cached) {
    int32_t& count = ref_counts_.at(static_cast<size_t>(id));
    if (count <= 0) throw Error("internal: release of unused block " + std::to_string(id));
    if (--count > 0) return;
    if (keep_cached)
        lru_push_back(id);
    else
        free_ids_.push_back(id);
}

void BlockPool::touch(int32_t id) {
    if (!is_cached(id)) throw Error("internal: touch of block " + std::to_string(id) + ", which is not cached");
    lru_remove(id);
    lru_push_back(id);
}

void BlockPool::lru_push_back(int32_t id) {
    const size_t i = static_cast<size_t>(id);
    lru_prev_[i] = lru_newest_;
    lru_next_[i] = -1;
    if (lru_newest_ >= 0)
        lru_next_[static_cast<size_t>(lru_newest_)] = id;
    else
        lru_oldest_ = id;
    lru_newest_ = id;
    in_lru_[i] = 1;
    ++num_cached_;
}

void BlockPool::lru_remove(int32_t id) {
    const size_t i = static_cast<size_t>(id);
    const int32_t prev = lru_prev_[i], next = lru_next_[i];
    if (prev >= 0)
        lru_next_[static_cast<size_t>(prev)] = next;
    else
        lru_oldest_ = next;
    if (next >= 0)
        lru_prev_[static_cast<size_t>(next)] = prev;
    else
        lru_newest_ = prev;
    lru_prev_[i] = lru_next_[i] = -1;
    in_lru_[i] = 0;
    --num_cached_;
}

std::vector<int32_t> BlockPool::lru_order() const {
    std::vector<int32_t> order;
    for (int32_t id = lru_oldest_; id >= 0 && order.size() <= ref_counts_.size(); id = lru_next_[static_cast<size_t>(id)])
        order.push_back(id);
    return order;
}

void BlockPool::check_invariants() const {
    auto fail = [](const std::string& what) { throw Error("KV cache invariant broken: " + what); };
    const size_t n = ref_counts_.size();
    std::vector<int> seen(n, 0);  // how many of the two lists hold each block
    for (int32_t id : free_ids_) {
        if (id < 0 || static_cast<size_t>(id) >= n) fail("the free list holds an id out of range");
        if (ref_counts_[static_cast<size_t>(id)] != 0) fail("block " + std::to_string(id) + " is used and free");
        if (in_lru_[static_cast<size_t>(id)]) fail("block " + std::to_string(id) + " is both free and cached");
        if (seen[static_cast<size_t>(id)]++) fail("block " + std::to_string(id) + " is free twice");
    }
    const std::vector<int32_t> lru = lru_order();
    if (lru.size() != static_cast<size_t>(num_cached_))
        fail("the LRU list has " + std::to_string(lru.size()) + " blocks but counts " + std::to_string(num_cached_));
    int32_t prev = -1;
    for (int32_t id : lru) {
        const size_t i = static_cast<size_t>(id);
        if (!in_lru_[i]) fail("block " + std::to_string(id) + " is linked into the LRU list but not marked cached");
        if (lru_prev_[i] != prev) fail("the LRU list's back link at block " + std::to_string(id) + " is wrong");
        if (ref_counts_[i] != 0) fail("block " + std::to_string(id) + " is used and cached");
        if (seen[i]++) fail("block " + std::to_string(id) + " is cached twice or cached and free");
        prev = id;
    }
    if (prev != lru_newest_) fail("the LRU list's newest end is wrong");
    for (size_t i = 0; i < n; ++i) {
        if (ref_counts_[i] < 0) fail("block " + std::to_string(i) + " has a negative ref count");
        if (ref_counts_[i] == 0 && seen[i] != 1) fail("block " + std::to_string(i) + " is unused but neither free nor cached");
        if (in_lru_[i] && seen[i] != 1) fail("block " + std::to_string(i) + " is marked cached but not in the LRU list");
    }
}

}  // namespace kvx
