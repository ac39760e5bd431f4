#include "engine/kv_cache_manager.h"

#include "engine/error.h"

namespace kvx {

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size) : pool_(num_blocks), block_size_(block_size) {
    if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0)
        throw Error("block size " + std::to_string(block_size) + " is invalid: use a power of two from 1 to 256");
}

const KvCacheManager::Sequence& KvCacheManager::get(SeqId seq) const {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) throw Error("no sequence with id " + std::to_string(seq) + " in the KV cache");
    return it->second;
}

KvCacheManager::Sequence& KvCacheManager::get(SeqId seq) {
    return const_cast<Sequence&>(static_cast<const KvCacheManager*>(this)->get(seq));
}

SeqId KvCacheManager::create_sequence() {
    const SeqId id = next_id_++;
    seqs_.emplace(id, Sequence{});
    return id;
}

SeqId KvCacheManager::fork(SeqId parent) {
    Sequence child = get(parent);
    for (int32_t block : child.table) pool_.retain(block);
    const SeqId id = next_id_++;
    seqs_.emplace(id, std::move(child));
    return id;
}

void KvCacheManager::free_sequence(SeqId seq) {
    Sequence& s = get(seq);
    for (int32_t block : s.table) pool_.release(block);
    seqs_.erase(seq);
}

int32_t KvCacheManager::blocks_needed(SeqId seq, int32_t n) const {
    const Sequence& s = get(seq);
    if (n < 0) throw Error("cannot append a negative number of tokens");
    const int64_t new_len = int64_t{s.length} + n;
    const int64_t total = (new_len + block_size_ - 1) / block_size_;
    int64_t needed = total - static_cast<int64_t>(s.table.size());
    const bool writes_into_shared_tail =
        n > 0 && s.length % block_size_ != 0 && pool_.ref_count(s.table.back()) > 1;
    if (writes_into_shared_tail) ++needed;
    return static_cast<int32_t>(needed);
}

void KvCacheManager::throw_exhausted(int32_t needed) const {
    throw Error("KV cache pool exhausted: need " + std::to_string(needed) + " more blocks of " +
                std::to_string(block_size_) + " tokens but " + std::to_string(pool_.num_free()) + " of " +
                std::to_string(pool_.num_blocks()) + " are free (raise -c or free sequences)");
}

void KvCacheManager::append_slots(SeqId seq, int32_t n, int64_t* slots_out, std::vector<BlockCopy>& copies) {
    const int32_t needed = blocks_needed(seq, n);
    if (needed > pool_.num_free()) throw_exhausted(needed);
    Sequence& s = get(seq);
    if (n > 0 && s.length % block_size_ != 0 && pool_.ref_count(s.table.back()) > 1) {
        const int32_t shared = s.table.back();
        const int32_t copy = pool_.allocate();
        copies.push_back({shared, copy});
        pool_.release(shared);
        s.table.back() = copy;
    }
    for (int32_t i = 0; i < n; ++i) {
        const int32_t pos = s.length + i;
        if (pos % block_size_ == 0) s.table.push_back(pool_.allocate());
        const int32_t block = s.table[static_cast<size_t>(pos / block_size_)];
        slots_out[i] = int64_t{block} * block_size_ + pos % block_size_;
    }
    s.length += n;
}

void KvCacheManager::check_invariants() const {
    auto fail = [](const std::string& what) { throw Error("KV cache invariant broken: " + what); };
    std::vector<int32_t> holders(static_cast<size_t>(pool_.num_blocks()), 0);
    std::vector<SeqId> last_holder(holders.size(), -1);  // catches a table that holds a block twice
    for (const auto& [id, s] : seqs_) {
        const size_t expected = static_cast<size_t>((s.length + block_size_ - 1) / block_size_);
        if (s.table.size() != expected)
            fail("sequence " + std::to_string(id) + " of length " + std::to_string(s.length) + " has " +
                 std::to_string(s.table.size()) + " blocks, expected " + std::to_string(expected));
        for (int32_t block : s.table) {
            if (block < 0 || block >= pool_.num_blocks())
                fail("sequence " + std::to_string(id) + " holds block id " + std::to_string(block) + " out of range");
            const size_t b = static_cast<size_t>(block);
            if (last_holder[b] == id)
                fail("sequence " + std::to_string(id) + " holds block " + std::to_string(block) + " twice");
            last_holder[b] = id;
            ++holders[b];
        }
    }
    std::vector<bool> in_free_list(holders.size(), false);
    for (int32_t block : pool_.free_ids()) {
        if (block < 0 || block >= pool_.num_blocks()) fail("free list holds an id out of range");
        if (in_free_list[static_cast<size_t>(block)]) fail("block " + std::to_string(block) + " is free twice");
        in_free_list[static_cast<size_t>(block)] = true;
    }
    for (int32_t block = 0; block < pool_.num_blocks(); ++block) {
        const size_t b = static_cast<size_t>(block);
        if (pool_.ref_count(block) != holders[b])
            fail("block " + std::to_string(block) + " has ref count " + std::to_string(pool_.ref_count(block)) +
                 " but " + std::to_string(holders[b]) + " holders");
        if ((holders[b] == 0) != in_free_list[b])
            fail("block " + std::to_string(block) + (holders[b] == 0 ? " is unused but not free" : " is used and free"));
    }
}

}  // namespace kvx
