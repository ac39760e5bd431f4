// Sliding windows in the cache manager: which blocks a windowed sequence still holds, at the edges.
// Expectations are derived by hand from the window's definition (HF/Mistral): a query at position p sees
// keys p-W+1 .. p, so a block is needed while it holds one of them.
#include <catch2/catch.hpp>
#include <algorithm>
#include <vector>

#include "engine/cache/kv_cache_manager.h"
#include "kernels/error.h"
#include "kv_cache_support.h"

using namespace kvx;
using namespace kvx::test;

namespace {

KvCacheManager windowed(int32_t num_blocks, int32_t block_size, int32_t window) {
    KvCacheConfig c;
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    c.window = window;
    return KvCacheManager(c);
}

}  // namespace

TEST_CASE("a windowed sequence releases exactly the blocks before its last query's window", "[cache][window]") {
    // W = 8, block size 4. After the pass that queried position p, keys p-7 .. p are still needed.
    //   p = 10: keys 3..10, position 3 is in block 0          -> nothing released
    //   p = 11: keys 4..11, the window starts on a boundary   -> block 0 released
    //   p = 14: keys 7..14, position 7 is in block 1          -> still 1 released
    //   p = 15: keys 8..15                                    -> blocks 0 and 1 released
    //   p = 19: keys 12..19                                   -> blocks 0, 1, 2 released
    const std::vector<std::pair<int32_t, int32_t>> expected = {
        {0, 0}, {7, 0}, {8, 0}, {10, 0}, {11, 1}, {14, 1}, {15, 2}, {18, 2}, {19, 3}, {39, 8}};
    KvCacheManager m = windowed(16, 4, 8);
    const SeqId s = m.create_sequence();
    size_t next = 0;
    for (int32_t p = 0; p < 40; ++p) {
        append(m, s, 1);  // the pass that queries position p
        if (next < expected.size() && expected[next].first == p) {
            INFO("after the query at position " << p);
            CHECK(released_blocks(m, s) == expected[next].second);
            ++next;
        }
        // Every key the query at p used is still in a held block.
        for (int32_t key = std::max(0, p - 7); key <= p; ++key) CHECK(m.block_table(s)[static_cast<size_t>(key / 4)] >= 0);
    }
    CHECK(next == expected.size());
}

TEST_CASE("windowed memory stays bounded over a generation of ten windows", "[cache][window]") {
    for (int32_t bs : {1, 4, 16}) {
        for (int32_t window : {1, 5, 16, 33}) {
            // The bound from the header: one query's window of W keys spans at most ceil(W / bs) + 1 blocks.
            const int32_t bound = (window + bs - 1) / bs + 1;
            KvCacheManager m = windowed(bound, bs, window);  // a pool that holds exactly the bound
            const SeqId s = m.create_sequence();
            int32_t most = 0;
            for (int32_t p = 0; p < 10 * window + 3 * bs; ++p) {
                append(m, s, 1);
                most = std::max(most, m.pool().num_used());
            }
            INFO("block size " << bs << ", window " << window);
            CHECK(most <= bound);
            CHECK(m.length(s) == 10 * window + 3 * bs);
            m.free_sequence(s);
            CHECK(m.pool().num_used() == 0);
        }
    }
}

TEST_CASE("a prefill chunk longer than the window keeps what its first query needs", "[cache][window]") {
    KvCacheManager m = windowed(16, 4, 8);
    const SeqId s = m.create_sequence();
    append(m, s, 10);
    append(m, s, 12);  // queries positions 10..21; position 10 needs keys 3..10, so block 0 stays
    CHECK(m.length(s) == 22);
    CHECK(released_blocks(m, s) == 0);
    CHECK(m.pool().num_used() == 6);
    append(m, s, 1);  // queries 22: keys 15..22, so blocks 0, 1, 2 (positions 0..11) go
    CHECK(released_blocks(m, s) == 3);
    CHECK(m.pool().num_used() == 3);
}

TEST_CASE("a rewind needing positions the window released is refused", "[cache][window][rewind]") {
    KvCacheManager m = windowed(16, 4, 8);
    const SeqId s = m.create_sequence();
    for (int32_t p = 0; p < 40; ++p) append(m, s, 1);
    REQUIRE(released_blocks(m, s) == 8);  // the query at 39 kept keys 32..39
    const std::vector<int32_t> table = m.block_table(s);
    // A query at 38 needs key 31 (block 7, released); at 36 keys 29..36.
    for (int32_t n : {38, 36, 20, 1}) {
        INFO("rewind to " << n);
        CHECK_THROWS_WITH(m.rewind_to(s, n), Catch::Contains("sliding window of 8 already released positions before 32"));
        CHECK(m.block_table(s) == table);
        CHECK(m.length(s) == 40);
        m.check_invariants();
    }
    m.rewind_to(s, 39);  // needs keys 32..38: all held
    m.check_invariants();
    CHECK(m.length(s) == 39);
    append(m, s, 1);
    m.rewind_to(s, 0);  // needs nothing
    m.check_invariants();
    CHECK(m.pool().num_used() == 0);
}

TEST_CASE("a window longer than the sequence releases nothing", "[cache][window]") {
    KvCacheManager m = windowed(16, 4, 64);
    const SeqId s = m.create_sequence();
    for (int32_t p = 0; p < 60; ++p) append(m, s, 1);
    CHECK(released_blocks(m, s) == 0);
    CHECK(m.pool().num_used() == 15);
}

TEST_CASE("a fork of a windowed sequence shares only the blocks still held", "[cache][window]") {
    KvCacheManager m = windowed(16, 4, 4);
    const SeqId a = m.create_sequence();
    for (int32_t p = 0; p < 14; ++p) append(m, a, 1);  // the query at 13 kept keys 10..13: blocks 2, 3
    const SeqId b = m.fork(a);
    m.check_invariants();
    CHECK(m.block_table(b) == m.block_table(a));
    CHECK(released_blocks(m, b) == 2);
    CHECK(m.pool().num_used() == 2);
    append(m, b, 1);  // b's query at 14 keeps keys 11..14; its tail (2 of 4) was shared: copied
    append(m, a, 3);
    m.free_sequence(a);
    m.free_sequence(b);
    CHECK(m.pool().num_used() == 0);
}

TEST_CASE("the window's net block count lets a full pool keep generating", "[cache][window]") {
    // W = 5, block size 4: the query at 4k needs keys 4k-4 .. 4k, so the step that opens block k releases
    // block k-2 in the same append. With no free block at all, it must still go through.
    KvCacheManager m = windowed(2, 4, 5);
    const SeqId s = m.create_sequence();
    for (int32_t p = 0; p < 100; ++p) {
        if (p >= 8 && p % 4 == 0) {
            CHECK(m.pool().num_available() == 0);
            CHECK(m.blocks_needed(s, 1) == 0);
        }
        append(m, s, 1);
    }
    CHECK(m.length(s) == 100);
    CHECK(m.pool().num_used() == 2);
}

TEST_CASE("a bad window is refused by name", "[cache][window]") {
    CHECK_THROWS_WITH(windowed(4, 4, -1), Catch::Contains("sliding window of -1 tokens is invalid"));
}
