// Block tables of every live sequence over one BlockPool: the host-side bookkeeping of the paged KV cache
// for one layer group (all layers of a model, or those sharing one sliding window: engine/cache/kv_cache_groups.h).
//
//   sequence 7, length 37, block_size 16        pool (ref counts)
//   table: [ 4 | 9 | 2 ]                        block 4: 2  <- shared with sequence 8 (a fork)
//           |    |    '- positions 32..36 (5 of 16 used)
//           |    '------ positions 16..31
//           '----------- positions  0..15
//
// Position p of a sequence lives in block table[p / block_size] at offset p % block_size; its slot, the
// index the backend writes K/V to, is block * block_size + offset.
//
// Sharing: fork() copies a table and retains every block, so it never needs memory. Appending into a
// partly filled last block that others still hold first moves this sequence onto a private copy
// (copy-on-write); the manager only records the copy, the backend performs it before writing.
//
// Rewind: rewind_to(seq, n) sets the length to n and releases the blocks past it. It never writes: a block
// that others hold stays as they see it, and the next append into it copies on write as usual.
//
// Sliding window (window W > 0): a query at position p sees keys p-W+1 .. p. Blocks wholly before the
// window of the next query are released, and their table entries become -1 so that the table keeps its
// positional indexing (the attention kernel starts at max(0, p-W+1) and never reads a -1 entry):
//
//   W = 8, block_size 4, length 19: the next query (position 19) sees keys 12..19
//   table: [ -1 | -1 | -1 |  5 |  8 ]
//            0-3  4-7  8-11 12-15 16-18
//
// A multi-token append (a prefill chunk) queries from its first position, so blocks are released at the
// start of the next append, once the pass that needed them is over: memory stays at most
// ceil((W - 1 + chunk) / block_size) + 1 blocks per sequence, however long it grows. A rewind needing
// released positions again is refused (their K/V are gone).
//
// Prefix reuse: every block that becomes full is registered in the PrefixIndex under its hash chain.
// create_sequence(prompt, n_blocks) starts a sequence on the first n_blocks blocks of a prompt that are
// already in the cache (cached_prefix_blocks tells how many), so their prefill is skipped; a prompt cached
// whole starts one token short, as its last token's logits are still to compute. Blocks whose
// last holder lets go stay cached (LRU) while registered, until allocation needs them.
//
// Every operation that takes blocks is all-or-nothing: if the pool cannot supply them it throws kvx::Error
// and nothing has changed.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/cache/kv_cache_usage.h"
#include "engine/cache/prefix_index.h"
#include "kernels/block_copy.h"

namespace kvx {

using SeqId = int32_t;

// BlockCopy (kernels/block_copy.h): one block's contents, every layer, K and V, that the backend must copy
// before the next write.

// A sequence started on a prompt: its first cached_tokens tokens came from the prefix cache, so only
// prompt[cached_tokens..] still needs a forward pass (never empty: the last token's logits are wanted).
struct SequenceStart {
    SeqId seq;
    int32_t cached_tokens;
};

struct KvCacheConfig {
    int32_t num_blocks = 0;
    int32_t block_size = 16;                   // a power of two from 1 to 256
    int32_t window = 0;                        // 0: full attention; W > 0: a query at p sees keys p-W+1 .. p
    BlockHashFn block_hash = hash_block_tokens;  // tests inject colliding ones
};

// Throws kvx::Error for a block size that is not a power of two from 1 to 256, an empty pool or a negative
// window: what KvCacheManager refuses, asked before anything is sized by the config.
void check_kv_cache_config(const KvCacheConfig& config);

// The blocks of block_size tokens that hold `tokens` tokens of one sequence (block_size >= 1).
inline int32_t blocks_for(int64_t tokens, int32_t block_size) {
    return static_cast<int32_t>((tokens + block_size - 1) / block_size);
}

class KvCacheManager {
public:
    explicit KvCacheManager(const KvCacheConfig& config);
    KvCacheManager(int32_t num_blocks, int32_t block_size) : KvCacheManager(KvCacheConfig{num_blocks, block_size}) {}

    int32_t block_size() const { return block_size_; }
    int32_t window() const { return window_; }
    const BlockPool& pool() const { return pool_; }
    const PrefixIndex& prefix_index() const { return index_; }

    SeqId create_sequence();
    // Full blocks at the start of `prompt` that are cached (all of a prompt of whole blocks, possibly).
    int32_t cached_prefix_blocks(std::span<const int32_t> prompt) const;
    // A sequence holding the first n_blocks blocks of `prompt` from the cache, of length n_blocks *
    // block_size, or prompt.size() - 1 where they hold the whole prompt: the last prompt token is always left
    // to compute. The caller appends the rest of the prompt. Takes no free block. Throws kvx::Error if
    // n_blocks exceeds cached_prefix_blocks(prompt).
    SeqId create_sequence(std::span<const int32_t> prompt, int32_t n_blocks);
    // create_sequence(prompt, cached_prefix_blocks(prompt)).
    SequenceStart start_sequence(std::span<const int32_t> prompt);
    SeqId fork(SeqId parent);      // the child shares every block of the parent
    void free_sequence(SeqId seq);  // releases its blocks; the id becomes invalid
    // Sets the length to n (0 <= n <= length) and releases the blocks past it. Throws kvx::Error, with
    // nothing changed, for n out of range or when a windowed sequence already released positions the
    // query at n needs.
    void rewind_to(SeqId seq, int32_t n);
    // Throws what rewind_to(seq, n) would throw, changing nothing (several groups rewind all or none).
    void check_rewind(SeqId seq, int32_t n) const;

    bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
    int32_t length(SeqId seq) const { return get(seq).length; }
    // [ceil(length / block_size)] block ids, -1 where the window released them.
    const std::vector<int32_t>& block_table(SeqId seq) const { return get(seq).table; }
    // The chain of the sequence's full blocks, [length / block_size], whether or not it still holds them.
    const std::vector<ChainLink>& chain(SeqId seq) const { return get(seq).chain; }
    // First table entry the next query (at position length) needs: 0 without a window.
    int32_t first_needed_block(SeqId seq) const { return first_needed_block_at(get(seq).length); }
    size_t num_sequences() const { return seqs_.size(); }
    std::vector<SeqId> sequence_ids() const;  // ascending

    // Net change in available blocks that append_slots(seq, n) costs: new blocks plus a copy-on-write, less
    // the blocks only this sequence held that the window releases first. May be negative.
    int32_t blocks_needed(SeqId seq, int32_t n) const;

    // Extends the sequence by tokens.size() positions and writes their slots to slots_out[0..n). Copies the
    // caller must perform before writing are appended to copies. Throws kvx::Error if the pool runs out.
    void append_slots(SeqId seq, std::span<const int32_t> tokens, int64_t* slots_out, std::vector<BlockCopy>& copies);

    KvCacheUsage usage(size_t bytes_per_block = 0) const;

    // Throws kvx::Error describing the first broken invariant:
    //   pool:    every block's ref count equals the number of table entries holding it; the free list and
    //            the LRU list are disjoint and hold every unused block once (BlockPool::check_invariants);
    //            a block is cached exactly when it is unused and registered;
    //   tables:  ceil(length / block_size) entries, no block twice, and an entry is -1 exactly when it lies
    //            before the window of the oldest query the last append made;
    //   prefix:  the hash table is consistent with block contents (PrefixIndex::check_invariants), each
    //            sequence's chain has length / block_size links, and every full block it still holds is
    //            registered with exactly its link.
    void check_invariants() const;

private:
    struct Sequence {
        int32_t length = 0;           // tokens whose K/V are (or are about to be) in the cache
        int32_t oldest_query = 0;     // first position the last append queried from; the window keeps its keys
        std::vector<int32_t> table;   // [ceil(length / block_size)] physical block ids, -1 once released
        std::vector<ChainLink> chain; // [length / block_size] links of the full blocks
    };
    const Sequence& get(SeqId seq) const;
    Sequence& get(SeqId seq);
    int32_t first_needed_block_at(int32_t query_pos) const;
    // Walks prompt's full blocks through the index: up to max_blocks blocks and their links.
    int32_t walk_prefix(std::span<const int32_t> prompt, int32_t max_blocks, std::vector<int32_t>* blocks,
                        std::vector<ChainLink>* links) const;
    int32_t allocate_block();
    void release_block(int32_t block);
    // Releases entries [first_needed_block_at(s.oldest_query), first_needed_block_at(query_pos)).
    void release_before_window(Sequence& s, int32_t query_pos);
    [[noreturn]] void throw_exhausted(int32_t needed) const;

    BlockPool pool_;
    PrefixIndex index_;
    int32_t block_size_;
    int32_t window_;
    SeqId next_id_ = 0;
    std::map<SeqId, Sequence> seqs_;
};

}  // namespace kvx
