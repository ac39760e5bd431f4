#include "engine/cache/kv_cache_manager.h"

#include <algorithm>

#include "kernels/error.h"

namespace kvx {

void check_kv_cache_config(const KvCacheConfig& c) {
    if (c.block_size < 1 || c.block_size > 256 || (c.block_size & (c.block_size - 1)) != 0)
        throw Error("block size " + std::to_string(c.block_size) + " is invalid: use a power of two from 1 to 256");
    if (c.num_blocks <= 0) throw Error("the KV block pool needs at least one block");
    if (c.window < 0)
        throw Error("sliding window of " + std::to_string(c.window) + " tokens is invalid: use 0 (full attention) or more");
}

namespace {

// Checked before any member is built from it.
const KvCacheConfig& validated(const KvCacheConfig& c) {
    check_kv_cache_config(c);
    return c;
}

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : pool_(validated(config).num_blocks),
      index_(config.num_blocks, config.block_size, config.block_hash),
      block_size_(config.block_size),
      window_(config.window) {}

const KvCacheManager::Sequence& KvCacheManager::get(SeqId seq) const {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) throw Error("no sequence with id " + std::to_string(seq) + " in the KV cache");
    return it->second;
}

KvCacheManager::Sequence& KvCacheManager::get(SeqId seq) {
    return const_cast<Sequence&>(static_cast<const KvCacheManager*>(this)->get(seq));
}

int32_t KvCacheManager::first_needed_block_at(int32_t query_pos) const {
    if (window_ == 0) return 0;
    return std::max(0, query_pos - window_ + 1) / block_size_;
}

int32_t KvCacheManager::allocate_block() {
    const int32_t block = pool_.allocate();
    index_.forget(block);  // an evicted cached block: its old contents are about to be overwritten
    return block;
}

void KvCacheManager::release_block(int32_t block) { pool_.release(block, index_.registered(block)); }

void KvCacheManager::release_before_window(Sequence& s, int32_t query_pos) {
    const int32_t end = std::min(first_needed_block_at(query_pos), static_cast<int32_t>(s.table.size()));
    for (int32_t b = first_needed_block_at(s.oldest_query); b < end; ++b) {
        int32_t& entry = s.table[static_cast<size_t>(b)];
        if (entry >= 0) release_block(entry);
        entry = -1;
    }
}

std::vector<SeqId> KvCacheManager::sequence_ids() const {
    std::vector<SeqId> ids;
    for (const auto& [id, s] : seqs_) ids.push_back(id);
    return ids;
}

SeqId KvCacheManager::create_sequence() {
    const SeqId id = next_id_++;
    seqs_.emplace(id, Sequence{});
    return id;
}

int32_t KvCacheManager::walk_prefix(std::span<const int32_t> prompt, int32_t max_blocks, std::vector<int32_t>* blocks,
                                    std::vector<ChainLink>* links) const {
    ChainLink parent = index_.root();
    const size_t bs = static_cast<size_t>(block_size_);
    int32_t n = 0;
    for (; n < max_blocks && (static_cast<size_t>(n) + 1) * bs <= prompt.size(); ++n) {
        const int32_t block = index_.find(parent, prompt.subspan(static_cast<size_t>(n) * bs, bs), pool_);
        if (block < 0) break;
        parent = index_.link(block);
        if (blocks) blocks->push_back(block);
        if (links) links->push_back(parent);
    }
    return n;
}

int32_t KvCacheManager::cached_prefix_blocks(std::span<const int32_t> prompt) const {
    return walk_prefix(prompt, static_cast<int32_t>(prompt.size() / static_cast<size_t>(block_size_)), nullptr,
                       nullptr);
}

SeqId KvCacheManager::create_sequence(std::span<const int32_t> prompt, int32_t n_blocks) {
    std::vector<int32_t> blocks;
    Sequence s;
    if (n_blocks < 0 || walk_prefix(prompt, n_blocks, &blocks, &s.chain) != n_blocks)
        throw Error("cannot start a sequence on " + std::to_string(n_blocks) + " cached blocks of a " +
                    std::to_string(prompt.size()) + "-token prompt: only " + std::to_string(cached_prefix_blocks(prompt)) +
                    " are cached");
    // The last prompt token is always computed: its logits are the reason for the prefill. A prompt cached
    // whole starts one token short, and its last token is written again into the last block's last slot, in
    // place where the sequence alone holds the block (unregistered until full again, as after a rewind), else
    // into a copy (copy on write). So a repeated prompt computes one token, not a block of them. (With blocks
    // of one token, the last block is not taken at all.)
    const bool whole = n_blocks > 0 && int64_t{n_blocks} * block_size_ == static_cast<int64_t>(prompt.size());
    s.length = n_blocks * block_size_ - (whole ? 1 : 0);
    s.chain.resize(static_cast<size_t>(s.length / block_size_));
    s.oldest_query = s.length;
    const int32_t first = first_needed_block_at(s.length);
    const int32_t table_blocks = blocks_for(s.length, block_size_);
    for (int32_t b = 0; b < table_blocks; ++b) {
        const int32_t block = blocks[static_cast<size_t>(b)];
        if (b < first) {
            // Outside the window of the first query: not held, but kept warm for the next lookup's walk.
            if (pool_.is_cached(block)) pool_.touch(block);
            s.table.push_back(-1);
        } else {
            if (pool_.is_cached(block))
                pool_.reuse(block);
            else
                pool_.retain(block);
            s.table.push_back(block);
        }
    }
    const SeqId id = next_id_++;
    seqs_.emplace(id, std::move(s));
    return id;
}

SeqId KvCacheManager::fork(SeqId parent) {
    Sequence child = get(parent);
    for (int32_t block : child.table)
        if (block >= 0) pool_.retain(block);
    const SeqId id = next_id_++;
    seqs_.emplace(id, std::move(child));
    return id;
}

void KvCacheManager::free_sequence(SeqId seq) {
    Sequence& s = get(seq);
    // Last block first, so that a prompt's tail is evicted before its head, which more prompts share.
    for (auto it = s.table.rbegin(); it != s.table.rend(); ++it)
        if (*it >= 0) release_block(*it);
    seqs_.erase(seq);
}

SequenceStart KvCacheManager::start_sequence(std::span<const int32_t> prompt) {
    const SeqId seq = create_sequence(prompt, cached_prefix_blocks(prompt));
    return SequenceStart{seq, length(seq)};
}

void KvCacheManager::check_rewind(SeqId seq, int32_t n) const {
    const Sequence& s = get(seq);
    if (n < 0 || n > s.length)
        throw Error("cannot rewind sequence " + std::to_string(seq) + " to " + std::to_string(n) +
                    " tokens: it holds " + std::to_string(s.length) + " (use 0 to " + std::to_string(s.length) + ")");
    // The query at position n needs the blocks from first_needed_block_at(n) to the one position n goes
    // into, of those the sequence keeps; the blocks before its oldest query's window are gone. (Below the
    // kept ones: the keys, except with a window of 1, where a query needs no earlier key but position n
    // still needs its partly filled block.) n == 0 needs none.
    const int32_t keep = blocks_for(n, block_size_);
    const int32_t released = first_needed_block_at(s.oldest_query);
    if (first_needed_block_at(n) < std::min(released, keep))
        throw Error("cannot rewind sequence " + std::to_string(seq) + " to " + std::to_string(n) +
                    " tokens: its sliding window of " + std::to_string(window_) + " already released positions before " +
                    std::to_string(released * block_size_) + " that the query at position " + std::to_string(n) +
                    " needs");
}

void KvCacheManager::rewind_to(SeqId seq, int32_t n) {
    check_rewind(seq, n);
    Sequence& s = get(seq);
    const int32_t keep = blocks_for(n, block_size_);
    for (size_t b = s.table.size(); b-- > static_cast<size_t>(keep);)
        if (s.table[b] >= 0) release_block(s.table[b]);
    s.table.resize(static_cast<size_t>(keep));
    s.chain.resize(static_cast<size_t>(n / block_size_));
    s.length = n;
    s.oldest_query = std::min(s.oldest_query, n);
}

int32_t KvCacheManager::blocks_needed(SeqId seq, int32_t n) const {
    const Sequence& s = get(seq);
    if (n < 0) throw Error("cannot append a negative number of tokens");
    int64_t needed = blocks_for(int64_t{s.length} + n, block_size_) - static_cast<int64_t>(s.table.size());
    const bool writes_into_shared_tail =
        n > 0 && s.length % block_size_ != 0 && pool_.ref_count(s.table.back()) > 1;
    if (writes_into_shared_tail) ++needed;
    const int32_t end = std::min(first_needed_block_at(s.length), static_cast<int32_t>(s.table.size()));
    for (int32_t b = first_needed_block_at(s.oldest_query); b < end; ++b) {
        const int32_t block = s.table[static_cast<size_t>(b)];
        if (block >= 0 && pool_.ref_count(block) == 1) --needed;
    }
    return static_cast<int32_t>(needed);
}

void KvCacheManager::throw_exhausted(int32_t needed) const {
    throw Error("KV cache pool exhausted: need " + std::to_string(needed) + " more blocks of " +
                std::to_string(block_size_) + " tokens but " + std::to_string(pool_.num_available()) + " of " +
                std::to_string(pool_.num_blocks()) + " are free (raise -c or free sequences)");
}

void KvCacheManager::append_slots(SeqId seq, std::span<const int32_t> tokens, int64_t* slots_out,
                                  std::vector<BlockCopy>& copies) {
    const int32_t n = static_cast<int32_t>(tokens.size());
    const int32_t needed = blocks_needed(seq, n);
    if (needed > pool_.num_available()) throw_exhausted(needed);
    Sequence& s = get(seq);
    // The pass that queried from oldest_query is over; this one queries from the current length.
    release_before_window(s, s.length);
    s.oldest_query = s.length;
    if (n > 0 && s.length % block_size_ != 0 && pool_.ref_count(s.table.back()) > 1) {
        const int32_t shared = s.table.back();
        const int32_t copy = allocate_block();
        copies.push_back({shared, copy});
        index_.copy_block(shared, copy);
        release_block(shared);
        s.table.back() = copy;
    }
    for (int32_t i = 0; i < n; ++i) {
        const int32_t pos = s.length + i;
        if (pos % block_size_ == 0) s.table.push_back(allocate_block());
        const int32_t block = s.table[static_cast<size_t>(pos / block_size_)];
        const int64_t slot = int64_t{block} * block_size_ + pos % block_size_;
        slots_out[i] = slot;
        index_.forget(block);  // a rewound block written in place no longer holds what it was registered with
        index_.write(slot, tokens[static_cast<size_t>(i)]);
        if (pos % block_size_ == block_size_ - 1)
            s.chain.push_back(index_.register_full(block, s.chain.empty() ? index_.root() : s.chain.back()));
    }
    s.length += n;
}

KvCacheUsage KvCacheManager::usage(size_t bytes_per_block) const {
    KvCacheUsage u;
    u.block_size = block_size_;
    u.bytes_per_block = bytes_per_block;
    u.blocks_total = pool_.num_blocks();
    u.blocks_cached = pool_.num_cached();
    u.blocks_free = pool_.num_free();
    u.blocks_in_use = pool_.num_used();
    // The most slots of each used block any holder sees.
    std::vector<int32_t> filled(static_cast<size_t>(pool_.num_blocks()), 0);
    for (const auto& [id, s] : seqs_)
        for (size_t b = 0; b < s.table.size(); ++b) {
            if (s.table[b] < 0) continue;
            int32_t& f = filled[static_cast<size_t>(s.table[b])];
            f = std::max(f, std::min(block_size_, s.length - static_cast<int32_t>(b) * block_size_));
        }
    for (int32_t block = 0; block < pool_.num_blocks(); ++block) {
        if (pool_.ref_count(block) == 0) continue;
        if (pool_.ref_count(block) > 1) ++u.blocks_shared;
        u.slots_wasted += block_size_ - filled[static_cast<size_t>(block)];
    }
    return u;
}

void KvCacheManager::check_invariants() const {
    auto fail = [](const std::string& what) { throw Error("KV cache invariant broken: " + what); };
    pool_.check_invariants();
    index_.check_invariants();
    std::vector<int32_t> holders(static_cast<size_t>(pool_.num_blocks()), 0);
    std::vector<SeqId> last_holder(holders.size(), -1);  // catches a table that holds a block twice
    for (const auto& [id, s] : seqs_) {
        const std::string name = "sequence " + std::to_string(id);
        const size_t expected = static_cast<size_t>(blocks_for(s.length, block_size_));
        if (s.table.size() != expected)
            fail(name + " of length " + std::to_string(s.length) + " has " + std::to_string(s.table.size()) +
                 " blocks, expected " + std::to_string(expected));
        if (s.chain.size() != static_cast<size_t>(s.length / block_size_))
            fail(name + " has " + std::to_string(s.chain.size()) + " chain links for " + std::to_string(s.length) + " tokens");
        if (s.oldest_query < 0 || s.oldest_query > s.length) fail(name + " has its oldest query outside it");
        const int32_t first_live = first_needed_block_at(s.oldest_query);
        for (size_t b = 0; b < s.table.size(); ++b) {
            const int32_t block = s.table[b];
            const bool in_window = static_cast<int32_t>(b) >= first_live;
            if (block < 0) {
                if (block != -1 || in_window)
                    fail(name + " lacks block " + std::to_string(b) + ", which the window still needs");
                continue;
            }
            if (!in_window) fail(name + " still holds block " + std::to_string(b) + ", before its window");
            if (block >= pool_.num_blocks())
                fail(name + " holds block id " + std::to_string(block) + " out of range");
            const size_t i = static_cast<size_t>(block);
            if (last_holder[i] == id) fail(name + " holds block " + std::to_string(block) + " twice");
            last_holder[i] = id;
            ++holders[i];
            if (b < s.chain.size() && (!index_.registered(block) || !(index_.link(block) == s.chain[b])))
                fail(name + " holds full block " + std::to_string(block) + " whose registration differs from its chain");
        }
    }
    for (int32_t block = 0; block < pool_.num_blocks(); ++block) {
        const size_t b = static_cast<size_t>(block);
        if (pool_.ref_count(block) != holders[b])
            fail("block " + std::to_string(block) + " has ref count " + std::to_string(pool_.ref_count(block)) +
                 " but " + std::to_string(holders[b]) + " holders");
        if (holders[b] == 0 && pool_.is_cached(block) != index_.registered(block))
            fail("unused block " + std::to_string(block) + (pool_.is_cached(block) ? " is cached but not registered"
                                                                                     : " is registered but not cached"));
    }
}

}  // namespace kvx
