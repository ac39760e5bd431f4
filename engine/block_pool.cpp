#include "engine/block_pool.h"


#include "engine/error.h"

namespace kvx {

BlockPool::BlockPool(int32_t num_blocks) {
    if (num_blocks <= 0) throw Error("the KV block pool needs at least one block");
    ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
    free_ids_.reserve(static_cast<size_t>(num_blocks));
    for (int32_t id = num_blocks - 1; id >= 0; --id) free_ids_.push_back(id);
}

int32_t BlockPool::allocate() {
    if (free_ids_.empty()) throw Error("internal: BlockPool::allocate on an empty pool");
    const int32_t id = free_ids_.back();
    free_ids_.pop_back();
    ref_counts_[static_cast<size_t>(id)] = 1;
    return id;
}

void BlockPool::retain(int32_t id) {
    int32_t& count = ref_counts_.at(static_cast<size_t>(id));
    if (count <= 0) throw Error("internal: retain of free block " + std::to_string(id));
    ++count;
}

void BlockPool::release(int32_t id) {
    int32_t& count = ref_counts_.at(static_cast<size_t>(id));
    if (count <= 0) throw Error("internal: release of free block " + std::to_string(id));
    if (--count == 0) free_ids_.push_back(id);
}

}  // namespace kvx
