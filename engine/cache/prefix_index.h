// What each block of one pool holds, and which full blocks a new sequence whose prompt starts the same way
// can reuse instead of computing their K/V again.
//
// A block's identity is a chain: the K/V of tokens 16..31 depend on tokens 0..15 as well, so a full block is
// named by its own token ids and the chain of blocks before it, never by its tokens alone.
//
//   block of a sequence   0                1                2 (partly filled: not registered)
//   token ids             [t0 .. t15]      [t16 .. t31]     [t32 .. t36]
//   hash                  h0 = H(R, ..)    h1 = H(h0, ..)   -             R: the root, a fixed seed
//   chain id              c0               c1               -
//
// Equal prefixes give equal hash chains, so the hash finds candidates in one lookup. It does not decide:
// a candidate is accepted only when its token ids equal the prompt's and its parent's chain id equals the
// id already matched for the block before. Chain ids are exact where hashes are not: a block that becomes
// full takes the id of a registered block with the same parent id and the same tokens, if there is one,
// else an id never used before. An id therefore names one sequence of token blocks for ever, and two
// chains whose 64-bit hashes collide are never confused (tests inject a hash that always collides).
//
// Registration lasts while the contents do: a block is forgotten when it is written again (a rewound
// sequence appending into it) or handed out for other contents (allocation, eviction).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/cache/block_pool.h"

namespace kvx {

// Hash of one full block given its parent's hash: the chain over token ids.
using BlockHashFn = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);
uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens);

// Where a full block sits in the chain of its sequence.
struct ChainLink {
    uint64_t hash = 0;  // H(parent hash, token ids): finds candidates
    uint64_t id = 0;    // names the chain exactly; 0 before block 0 and for unregistered blocks
    bool operator==(const ChainLink&) const = default;
};

class PrefixIndex {
public:
    PrefixIndex(int32_t num_blocks, int32_t block_size, BlockHashFn hash);

    // The parent of every sequence's block 0.
    ChainLink root() const { return ChainLink{kRootHash, 0}; }

    // Block contents, [num_blocks][block_size] token ids, kept as the backend keeps K/V: written per slot,
    // copied per block.
    void write(int64_t slot, int32_t token) { tokens_[static_cast<size_t>(slot)] = token; }
    void copy_block(int32_t src, int32_t dst);
    std::span<const int32_t> tokens(int32_t block) const;

    bool registered(int32_t block) const { return meta(block).link.id != 0; }
    const ChainLink& link(int32_t block) const { return meta(block).link; }
    size_t num_registered() const { return by_hash_.size(); }

    // Registers a block whose every slot now holds its final token, after parent; returns its link.
    ChainLink register_full(int32_t block, const ChainLink& parent);
    // Drops a registration: the block's contents are about to change.
    void forget(int32_t block);
    // A registered block holding `tokens` after `parent`, preferring one a table already holds over a cached
    // one (reusing it costs no cached block), or -1.
    int32_t find(const ChainLink& parent, std::span<const int32_t> tokens, const BlockPool& pool) const;

    // Throws kvx::Error unless the hash table holds exactly the registered blocks, each once under its hash;
    // every registered block's hash is H(parent hash, its tokens); and blocks sharing a chain id share their
    // parent id and tokens, the parent id being older than the id.
    void check_invariants() const;

private:
    static constexpr uint64_t kRootHash = 0x6b76785f726f6f74;  // "kvx_root"

    struct Meta {
        ChainLink link;    // id 0: not registered
        ChainLink parent;  // the link of the block before it in the chain that registered it
    };
    const Meta& meta(int32_t block) const { return meta_.at(static_cast<size_t>(block)); }
    // A registered block with this hash, parent id and tokens, or -1.
    int32_t find_exact(uint64_t hash, uint64_t parent_id, std::span<const int32_t> tokens, const BlockPool* pool) const;

    int32_t block_size_;
    BlockHashFn hash_;
    std::vector<int32_t> tokens_;                         // [num_blocks][block_size] token ids
    std::vector<Meta> meta_;                              // [num_blocks]
    std::unordered_multimap<uint64_t, int32_t> by_hash_;  // hash -> registered block ids
    uint64_t next_id_ = 1;
};

}  // namespace kvx
