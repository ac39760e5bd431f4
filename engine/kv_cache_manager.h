// Block tables of every live sequence over one BlockPool: the host-side bookkeeping of the paged KV cache.
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
// Every operation that takes blocks is all-or-nothing: if the pool cannot supply them it throws kvx::Error
// and nothing has changed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/block_pool.h"

namespace kvx {

using SeqId = int32_t;

// Copy of one block's contents (every layer, K and V) that the backend must perform before the next write.
struct BlockCopy {
    int32_t src;
    int32_t dst;
};

class KvCacheManager {
public:
    KvCacheManager(int32_t num_blocks, int32_t block_size);

    int32_t block_size() const { return block_size_; }
    const BlockPool& pool() const { return pool_; }

    SeqId create_sequence();
    SeqId fork(SeqId parent);      // the child shares every block of the parent
    void free_sequence(SeqId seq);  // releases its blocks; the id becomes invalid

    bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
    int32_t length(SeqId seq) const { return get(seq).length; }
    const std::vector<int32_t>& block_table(SeqId seq) const { return get(seq).table; }
    size_t num_sequences() const { return seqs_.size(); }

    // Blocks that append_slots(seq, n) would take from the pool (new blocks plus a copy-on-write).
    int32_t blocks_needed(SeqId seq, int32_t n) const;

    // Extends the sequence by n positions and writes their slots to slots_out[0..n). Copies the caller must
    // perform before writing are appended to copies. Throws kvx::Error if the pool runs out.
    void append_slots(SeqId seq, int32_t n, int64_t* slots_out, std::vector<BlockCopy>& copies);

    // Throws kvx::Error describing the first broken invariant: every block's ref count equals the number of
    // tables that hold it, the free list holds exactly the blocks with count 0 and each once, no table holds
    // a block twice, and every table has exactly ceil(length / block_size) blocks.
    void check_invariants() const;

private:
    struct Sequence {
        int32_t length = 0;          // tokens whose K/V are (or are about to be) in the cache
        std::vector<int32_t> table;  // [ceil(length / block_size)] physical block ids
    };
    const Sequence& get(SeqId seq) const;
    Sequence& get(SeqId seq);
    [[noreturn]] void throw_exhausted(int32_t needed) const;

    BlockPool pool_;
    int32_t block_size_;
    SeqId next_id_ = 0;
    std::map<SeqId, Sequence> seqs_;
};

}  // namespace kvx
