#include "engine/cache/prefix_index.h"

#include <algorithm>
#include <string>

#include "kernels/error.h"

namespace kvx {
namespace {

// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens) {
    uint64_t h = mix64(parent_hash);
    for (int32_t token : tokens) h = mix64(h ^ (uint64_t{static_cast<uint32_t>(token)} + 0x9e3779b97f4a7c15ull));
    return mix64(h ^ tokens.size());
}

PrefixIndex::PrefixIndex(int32_t num_blocks, int32_t block_size, BlockHashFn hash)
    : block_size_(block_size), hash_(hash), meta_(static_cast<size_t>(num_blocks)) {
    if (!hash_) throw Error("internal: PrefixIndex without a hash function");
    tokens_.assign(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size), -1);
}

std::span<const int32_t> PrefixIndex::tokens(int32_t block) const {
    return std::span<const int32_t>(tokens_).subspan(static_cast<size_t>(block) * static_cast<size_t>(block_size_),
                                                     static_cast<size_t>(block_size_));
}

void PrefixIndex::copy_block(int32_t src, int32_t dst) {
    const auto from = tokens(src);
    std::copy(from.begin(), from.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(dst) * block_size_);
}

int32_t PrefixIndex::find_exact(uint64_t hash, uint64_t parent_id, std::span<const int32_t> tokens,
                                const BlockPool* pool) const {
    int32_t found = -1;
    auto [it, end] = by_hash_.equal_range(hash);
    for (; it != end; ++it) {
        const int32_t block = it->second;
        if (meta(block).parent.id != parent_id) continue;
        const auto held = this->tokens(block);
        if (!std::equal(held.begin(), held.end(), tokens.begin(), tokens.end())) continue;
        if (!pool || pool->ref_count(block) > 0) return block;
        if (found < 0) found = block;
    }
    return found;
}

ChainLink PrefixIndex::register_full(int32_t block, const ChainLink& parent) {
    if (registered(block)) throw Error("internal: block " + std::to_string(block) + " registered twice");
    const auto contents = tokens(block);
    const uint64_t hash = hash_(parent.hash, contents);
    const int32_t same = find_exact(hash, parent.id, contents, nullptr);
    const ChainLink link{hash, same >= 0 ? meta(same).link.id : next_id_++};
    meta_[static_cast<size_t>(block)] = Meta{link, parent};
    by_hash_.emplace(hash, block);
    return link;
}

void PrefixIndex::forget(int32_t block) {
    Meta& m = meta_.at(static_cast<size_t>(block));
    if (m.link.id == 0) return;
    auto [it, end] = by_hash_.equal_range(m.link.hash);
    for (; it != end; ++it)
        if (it->second == block) {
            by_hash_.erase(it);
            break;
        }
    m = Meta{};
}

int32_t PrefixIndex::find(const ChainLink& parent, std::span<const int32_t> tokens, const BlockPool& pool) const {
    if (tokens.size() != static_cast<size_t>(block_size_)) return -1;
    return find_exact(hash_(parent.hash, tokens), parent.id, tokens, &pool);
}

void PrefixIndex::check_invariants() const {
    auto fail = [](const std::string& what) { throw Error("KV cache invariant broken: " + what); };
    std::vector<int> listed(meta_.size(), 0);
    for (const auto& [hash, block] : by_hash_) {
        if (block < 0 || static_cast<size_t>(block) >= meta_.size()) fail("the prefix index holds a block out of range");
        if (!registered(block)) fail("the prefix index lists block " + std::to_string(block) + ", which is not registered");
        if (link(block).hash != hash) fail("block " + std::to_string(block) + " is listed under another hash");
        if (listed[static_cast<size_t>(block)]++) fail("block " + std::to_string(block) + " is listed twice");
    }
    std::unordered_map<uint64_t, int32_t> first_with_id;  // chain id -> a block registered with it
    for (int32_t block = 0; block < static_cast<int32_t>(meta_.size()); ++block) {
        if (!registered(block)) continue;
        const std::string name = "registered block " + std::to_string(block);
        const Meta& m = meta(block);
        if (!listed[static_cast<size_t>(block)]) fail(name + " is missing from the prefix index");
        if (m.link.hash != hash_(m.parent.hash, tokens(block))) fail(name + " has a hash that its tokens do not give");
        if (m.link.id >= next_id_ || m.parent.id >= m.link.id) fail(name + " has chain ids out of order");
        auto [it, fresh] = first_with_id.emplace(m.link.id, block);
        if (fresh) continue;
        const Meta& other = meta(it->second);
        const auto a = tokens(block), b = tokens(it->second);
        if (other.parent.id != m.parent.id || other.link.hash != m.link.hash || !std::equal(a.begin(), a.end(), b.begin()))
            fail(name + " shares chain id " + std::to_string(m.link.id) + " with block " + std::to_string(it->second) +
                 " but not its parent or tokens");
    }
}

}  // namespace kvx
