// Prefix reuse in the cache manager: the hash chain, collisions, the LRU of cached blocks, and how reuse
// combines with fork, copy-on-write, rewind and windows.
#include <catch2/catch.hpp>
#include <vector>

#include "engine/cache/kv_cache_manager.h"
#include "kernels/error.h"
#include "kv_cache_support.h"

using namespace kvx;
using namespace kvx::test;

namespace {

// Every block hashes alike: only the token and chain comparison can tell blocks apart.
uint64_t colliding_hash(uint64_t, std::span<const int32_t>) { return 42; }

KvCacheManager manager(int32_t num_blocks, int32_t block_size, BlockHashFn hash = hash_block_tokens,
                       int32_t window = 0) {
    KvCacheConfig c;
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    c.window = window;
    c.block_hash = hash;
    return KvCacheManager(c);
}

// A sequence that held `tokens` and was freed, leaving its full blocks cached.
void cache_prompt(KvCacheManager& m, const std::vector<int32_t>& tokens) {
    const SeqId s = m.create_sequence();
    append(m, s, tokens);
    m.free_sequence(s);
    m.check_invariants();
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST_CASE("equal prefixes give equal hash chains, and different ones differ", "[cache][prefix]") {
    KvCacheManager m = manager(16, 4);
    const SeqId a = m.create_sequence(), b = m.create_sequence(), c = m.create_sequence();
    append(m, a, token_run(12, 10));
    append(m, b, concat(token_run(8, 10), token_run(4, 90)));
    append(m, c, concat(token_run(4, 50), token_run(8, 14)));  // block 1 and 2 tokens as a's, block 0 not
    REQUIRE(m.chain(a).size() == 3);
    CHECK(m.chain(b)[0] == m.chain(a)[0]);
    CHECK(m.chain(b)[1] == m.chain(a)[1]);
    CHECK(m.chain(b)[2].hash != m.chain(a)[2].hash);
    for (size_t i = 0; i < 3; ++i) CHECK(m.chain(c)[i].hash != m.chain(a)[i].hash);
}

TEST_CASE("a prompt starting with cached blocks reuses them and skips their tokens", "[cache][prefix]") {
    KvCacheManager m = manager(16, 4);
    const std::vector<int32_t> first = token_run(10, 100);
    const SeqId a = m.create_sequence();
    append(m, a, first);
    const std::vector<int32_t> a_blocks = m.block_table(a);
    m.free_sequence(a);
    CHECK(m.pool().num_cached() == 2);  // the two full blocks; the partial third is free

    const std::vector<int32_t> prompt = concat(token_run(8, 100), token_run(5, 7));
    REQUIRE(m.cached_prefix_blocks(prompt) == 2);
    const SeqId b = m.create_sequence(prompt, 2);
    m.check_invariants();
    CHECK(m.length(b) == 8);
    CHECK(m.block_table(b) == std::vector<int32_t>(a_blocks.begin(), a_blocks.begin() + 2));
    CHECK(m.pool().num_cached() == 0);
    CHECK(m.pool().ref_count(a_blocks[0]) == 1);
    // The rest of the prompt goes on from position 8.
    const auto slots = append(m, b, std::span<const int32_t>(prompt).subspan(8));
    CHECK(m.length(b) == 13);
    CHECK(slots[0] == int64_t{m.block_table(b)[2]} * 4);

    SECTION("a second sequence shares the blocks the first holds") {
        const SeqId c = m.create_sequence(prompt, m.cached_prefix_blocks(prompt));
        m.check_invariants();
        CHECK(m.length(c) == 12);  // three full blocks of b now; the last prompt token is left to compute
        CHECK(m.pool().ref_count(a_blocks[0]) == 2);
    }
}

TEST_CASE("the last prompt token is never taken from the cache", "[cache][prefix]") {
    KvCacheManager m = manager(16, 4);
    const std::vector<int32_t> prompt = token_run(12, 3);
    cache_prompt(m, prompt);
    CHECK(m.cached_prefix_blocks(prompt) == 3);  // 12 tokens: three full blocks, all cached
    CHECK(m.cached_prefix_blocks(concat(prompt, {1})) == 3);
    CHECK(m.cached_prefix_blocks(std::vector<int32_t>(prompt.begin(), prompt.begin() + 5)) == 1);
    CHECK(m.cached_prefix_blocks(std::vector<int32_t>(prompt.begin(), prompt.begin() + 4)) == 1);
    CHECK(m.cached_prefix_blocks(std::vector<int32_t>(prompt.begin(), prompt.begin() + 3)) == 0);
    CHECK(m.cached_prefix_blocks({}) == 0);
    CHECK_THROWS_WITH(m.create_sequence(prompt, 4), Catch::Contains("cannot start a sequence on 4 cached blocks"));
    CHECK_THROWS_WITH(m.create_sequence(token_run(12, 4), 1), Catch::Contains("only 0 are cached"));
    CHECK_THROWS_WITH(m.create_sequence(prompt, -1), Catch::Contains("cannot start"));
    m.check_invariants();
    CHECK(m.num_sequences() == 0);

    // Cached whole, the prompt starts one token short: its last token is computed again.
    const SequenceStart whole = m.start_sequence(prompt);
    CHECK(whole.cached_tokens == 11);
    CHECK(m.length(whole.seq) == 11);
    CHECK(m.block_table(whole.seq).size() == 3);
    CHECK(m.chain(whole.seq).size() == 2);  // the third block is not full from the sequence's side
    m.check_invariants();
    const SequenceStart part = m.start_sequence(std::vector<int32_t>(prompt.begin(), prompt.begin() + 4));
    CHECK(part.cached_tokens == 3);
    m.check_invariants();
}

TEST_CASE("a prompt cached whole writes its last token into its last block, copied where shared", "[cache][prefix]") {
    KvCacheManager m = manager(16, 4);
    const std::vector<int32_t> prompt = token_run(8, 3);
    cache_prompt(m, prompt);
    const SequenceStart a = m.start_sequence(prompt);
    const SequenceStart b = m.start_sequence(prompt);
    const int32_t tail = m.block_table(a.seq)[1];
    CHECK(m.block_table(b.seq)[1] == tail);
    CHECK(m.pool().ref_count(tail) == 2);
    const std::vector<int32_t> last(prompt.end() - 1, prompt.end());

    // a shares the tail with b: it writes into a copy, which is full again and registered.
    std::vector<BlockCopy> copies;
    CHECK(m.blocks_needed(a.seq, 1) == 1);
    const std::vector<int64_t> a_slot = append(m, a.seq, last, &copies);
    REQUIRE(copies.size() == 1);
    CHECK(copies[0].src == tail);
    CHECK(a_slot[0] == int64_t{copies[0].dst} * 4 + 3);
    CHECK(m.chain(a.seq).size() == 2);

    // b now holds the tail alone: it writes in place.
    copies.clear();
    CHECK(m.blocks_needed(b.seq, 1) == 0);
    const std::vector<int64_t> b_slot = append(m, b.seq, last, &copies);
    CHECK(copies.empty());
    CHECK(b_slot[0] == int64_t{tail} * 4 + 3);
    CHECK(m.chain(b.seq) == m.chain(a.seq));
    m.free_sequence(a.seq);
    m.free_sequence(b.seq);
    m.check_invariants();
    CHECK(m.cached_prefix_blocks(prompt) == 2);
}

TEST_CASE("colliding hashes are told apart by tokens and by chain", "[cache][prefix]") {
    KvCacheManager m = manager(16, 4, colliding_hash);
    const std::vector<int32_t> A = token_run(4, 10), B = token_run(4, 20), C = token_run(4, 30);
    const SeqId ab = m.create_sequence(), cb = m.create_sequence();
    append(m, ab, concat(A, B));
    append(m, cb, concat(C, B));  // block 1 has ab's tokens after another block 0
    CHECK(m.chain(ab)[0].hash == m.chain(cb)[0].hash);  // the hash cannot tell
    CHECK(m.chain(ab)[1].hash == m.chain(cb)[1].hash);
    CHECK(m.chain(ab)[1].id != m.chain(cb)[1].id);      // the chain id can

    CHECK(m.cached_prefix_blocks(concat(concat(A, B), {1})) == 2);
    CHECK(m.cached_prefix_blocks(concat(concat(B, B), {1})) == 0);  // nothing starts with B
    CHECK(m.cached_prefix_blocks(concat(concat(A, C), {1})) == 1);
    const SeqId s = m.create_sequence(concat(concat(C, B), {1}), 2);
    m.check_invariants();
    CHECK(m.block_table(s) == m.block_table(cb));  // cb's block 1, not ab's, though both hash and hold B
}

TEST_CASE("freed blocks are evicted least recently used first, a prompt's tail before its head", "[cache][prefix]") {
    KvCacheManager m = manager(4, 4);
    const std::vector<int32_t> pa = token_run(8, 100), pb = token_run(8, 200);
    const SeqId a = m.create_sequence(), b = m.create_sequence();
    append(m, a, pa);
    append(m, b, pb);
    const std::vector<int32_t> ta = m.block_table(a), tb = m.block_table(b);
    m.free_sequence(a);
    m.free_sequence(b);
    CHECK(m.pool().lru_order() == std::vector<int32_t>{ta[1], ta[0], tb[1], tb[0]});
    CHECK(m.pool().num_free() == 0);

    const SeqId c = m.create_sequence();
    append(m, c, 1);  // evicts a's tail
    CHECK(m.block_table(c)[0] == ta[1]);
    CHECK(m.cached_prefix_blocks(concat(pa, {1})) == 1);
    CHECK(m.cached_prefix_blocks(concat(pb, {1})) == 2);

    SECTION("a hit makes its blocks the most recently used") {
        const SeqId d = m.create_sequence(concat(pb, {1}), 2);
        m.free_sequence(d);
        CHECK(m.pool().lru_order() == std::vector<int32_t>{ta[0], tb[1], tb[0]});
        append(m, c, 4);  // evicts a's head next, b's blocks were used after it
        CHECK(m.block_table(c)[1] == ta[0]);
        CHECK(m.cached_prefix_blocks(concat(pb, {1})) == 2);
    }
}

TEST_CASE("a block rewritten after a rewind loses its registration", "[cache][prefix][rewind]") {
    KvCacheManager m = manager(8, 4);
    const std::vector<int32_t> old_tokens = token_run(8, 100);
    const SeqId s = m.create_sequence();
    append(m, s, old_tokens);
    const int32_t block1 = m.block_table(s)[1];
    m.rewind_to(s, 6);  // alone in block 1: the next append writes it in place
    CHECK(m.prefix_index().registered(block1));  // unchanged until written
    const std::vector<int32_t> edit = {7, 7};
    append(m, s, edit);
    CHECK(m.block_table(s)[1] == block1);
    m.free_sequence(s);
    m.check_invariants();
    CHECK(m.cached_prefix_blocks(concat(old_tokens, {1})) == 1);  // the old second block is gone
    std::vector<int32_t> edited(old_tokens.begin(), old_tokens.begin() + 6);
    edited.insert(edited.end(), {7, 7, 1});
    CHECK(m.cached_prefix_blocks(edited) == 2);
}

TEST_CASE("a rewound sequence sharing a registered block copies it and the others keep the hit", "[cache][prefix][rewind]") {
    KvCacheManager m = manager(8, 4);
    const std::vector<int32_t> tokens = token_run(8, 100);
    const SeqId a = m.create_sequence();
    append(m, a, tokens);
    const SeqId b = m.fork(a);
    m.rewind_to(b, 5);
    std::vector<BlockCopy> copies;
    append(m, b, std::vector<int32_t>{9, 9, 9}, &copies);
    REQUIRE(copies.size() == 1);
    CHECK(m.cached_prefix_blocks(concat(tokens, {1})) == 2);  // a's block 1 still holds the original tokens
    CHECK(m.chain(b)[1].hash != m.chain(a)[1].hash);
    m.free_sequence(a);
    m.free_sequence(b);
    m.check_invariants();
    CHECK(m.pool().num_cached() == 3);  // block 0, a's block 1, b's rewritten block 1
}

TEST_CASE("a fork of a prefix hit shares the cached blocks once more", "[cache][prefix]") {
    KvCacheManager m = manager(8, 4);
    const std::vector<int32_t> prompt = token_run(9, 100);
    cache_prompt(m, prompt);
    const SeqId a = m.create_sequence(prompt, 2);
    const SeqId b = m.fork(a);
    m.check_invariants();
    CHECK(m.pool().ref_count(m.block_table(a)[0]) == 2);
    append(m, a, std::vector<int32_t>{1});
    append(m, b, std::vector<int32_t>{2});  // different last tokens: different third blocks
    CHECK(m.block_table(a)[2] != m.block_table(b)[2]);
}

TEST_CASE("a windowed prefix hit holds only the blocks the window needs", "[cache][prefix][window]") {
    // W = 4, block size 4: a sequence starting at position 16 queries keys 13..16, so of blocks 0..3 it
    // needs block 3 alone; the walk still checks the whole chain from block 0.
    KvCacheManager m = manager(16, 4, hash_block_tokens, 4);
    const std::vector<int32_t> prompt = token_run(17, 100);
    const SeqId a = m.create_sequence();
    for (int32_t token : prompt) append(m, a, std::vector<int32_t>{token});
    m.free_sequence(a);
    m.check_invariants();
    REQUIRE(m.cached_prefix_blocks(prompt) == 4);
    const SeqId b = m.create_sequence(prompt, 4);
    m.check_invariants();
    CHECK(m.length(b) == 16);
    CHECK(released_blocks(m, b) == 3);
    CHECK(m.pool().num_used() == 1);
    append(m, b, std::vector<int32_t>{prompt[16]});
    // A rewind needing the blocks the hit never took is refused like any other.
    CHECK_THROWS_WITH(m.rewind_to(b, 8), Catch::Contains("sliding window of 4 already released"));
}
