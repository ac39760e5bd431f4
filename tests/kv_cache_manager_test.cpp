// The cache manager alone: no model, no kernels, no memory behind the blocks. Every test runs the invariant
// checker after every operation.
#include <catch2/catch.hpp>
#include <algorithm>
#include <vector>

#include "engine/cache/kv_cache_manager.h"
#include "kernels/error.h"
#include "kv_cache_support.h"

using namespace kvx;
using namespace kvx::test;

TEST_CASE("slots follow the block table", "[cache]") {
    for (int32_t bs : {1, 2, 4, 16, 256}) {
        KvCacheManager m(64, bs);
        const SeqId s = m.create_sequence();
        const int32_t n = std::min(3 * bs + 1, 64 * bs);
        auto slots = append(m, s, n);
        REQUIRE(m.length(s) == n);
        const auto& table = m.block_table(s);
        REQUIRE(table.size() == static_cast<size_t>((n + bs - 1) / bs));
        for (int32_t p = 0; p < n; ++p)
            CHECK(slots[static_cast<size_t>(p)] == int64_t{table[static_cast<size_t>(p / bs)]} * bs + p % bs);
        m.free_sequence(s);
        m.check_invariants();
        CHECK(m.pool().num_used() == 0);
        CHECK(m.pool().num_available() == 64);
    }
}

TEST_CASE("appends one token at a time take a new block only at a boundary", "[cache]") {
    KvCacheManager m(8, 4);
    const SeqId s = m.create_sequence();
    for (int32_t i = 0; i < 32; ++i) {
        CHECK(m.blocks_needed(s, 1) == (i % 4 == 0 ? 1 : 0));
        append(m, s, 1);
        CHECK(m.pool().num_used() == i / 4 + 1);
    }
}

TEST_CASE("fork shares blocks and counts references", "[cache]") {
    KvCacheManager m(16, 4);
    const SeqId a = m.create_sequence();
    append(m, a, 10);  // blocks: full, full, 2 of 4
    const SeqId b = m.fork(a);
    m.check_invariants();
    CHECK(m.pool().num_used() == 3);
    for (int32_t block : m.block_table(a)) CHECK(m.pool().ref_count(block) == 2);

    SECTION("writing into the shared last block copies it first") {
        std::vector<BlockCopy> copies;
        const int32_t shared_tail = m.block_table(b).back();
        auto slots = append(m, b, 1, &copies);
        REQUIRE(copies.size() == 1);
        CHECK(copies[0].src == shared_tail);
        CHECK(copies[0].dst == m.block_table(b).back());
        CHECK(m.block_table(a).back() == shared_tail);
        CHECK(m.pool().ref_count(shared_tail) == 1);
        CHECK(slots[0] == int64_t{copies[0].dst} * 4 + 2);
        // The full blocks stay shared.
        CHECK(m.pool().ref_count(m.block_table(a)[0]) == 2);
        // The original holder now owns its tail alone and writes in place.
        std::vector<BlockCopy> none;
        append(m, a, 1, &none);
        CHECK(none.empty());
    }
    SECTION("freeing one holder keeps the blocks for the other") {
        m.free_sequence(a);
        m.check_invariants();
        CHECK(m.pool().num_used() == 3);
        m.free_sequence(b);
        m.check_invariants();
        CHECK(m.pool().num_used() == 0);
    }
    SECTION("a fork at a block boundary needs no copy") {
        append(m, a, 2);  // a: 12 tokens, 3 full blocks (its own tail was copied)
        const SeqId c = m.fork(a);
        std::vector<BlockCopy> copies;
        append(m, c, 1, &copies);
        CHECK(copies.empty());
    }
}

TEST_CASE("pool exhaustion is a clear error that changes nothing", "[cache]") {
    KvCacheManager m(4, 8);
    const SeqId a = m.create_sequence();
    append(m, a, 20);  // 3 blocks
    const SeqId b = m.create_sequence();
    std::vector<int64_t> slots(16);
    std::vector<BlockCopy> copies;
    try {
        m.append_slots(b, token_run(16), slots.data(), copies);
        FAIL("expected an exhausted pool");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("KV cache pool exhausted") && Catch::Contains("need 2 more blocks") &&
                                 Catch::Contains("1 of 4 are free"));
    }
    m.check_invariants();
    CHECK(m.length(b) == 0);
    CHECK(m.block_table(b).empty());
    CHECK(m.pool().num_available() == 1);
    append(m, b, 8);  // what fits still works
    m.free_sequence(a);
    m.free_sequence(b);
    m.check_invariants();
    CHECK(m.pool().num_used() == 0);
    CHECK(m.pool().num_available() == 4);
}

TEST_CASE("a copy-on-write counts against the pool", "[cache]") {
    KvCacheManager m(2, 4);
    const SeqId a = m.create_sequence();
    append(m, a, 2);
    const SeqId b = m.fork(a);
    CHECK(m.blocks_needed(b, 1) == 1);
    append(m, b, 1);  // takes the last free block for the copy
    const SeqId c = m.fork(a);
    std::vector<int64_t> slot(1);
    std::vector<BlockCopy> copies;
    CHECK_THROWS_WITH(m.append_slots(c, token_run(1), slot.data(), copies), Catch::Contains("exhausted"));
    CHECK(copies.empty());
    m.check_invariants();
}

TEST_CASE("bad requests are refused by name", "[cache]") {
    CHECK_THROWS_WITH(KvCacheManager(16, 3), Catch::Contains("block size 3 is invalid"));
    CHECK_THROWS_WITH(KvCacheManager(16, 512), Catch::Contains("block size 512 is invalid"));
    CHECK_THROWS_WITH(KvCacheManager(0, 16), Catch::Contains("at least one block"));
    KvCacheManager m(4, 16);
    CHECK_THROWS_WITH(m.length(7), Catch::Contains("no sequence with id 7"));
    CHECK_THROWS_WITH(m.length(-1), Catch::Contains("no sequence with id -1"));
    CHECK_THROWS_WITH(m.fork(3), Catch::Contains("no sequence"));
    const SeqId s = m.create_sequence();
    m.free_sequence(s);
    CHECK_THROWS_WITH(m.free_sequence(s), Catch::Contains("no sequence"));
    CHECK_THROWS_WITH(m.blocks_needed(m.create_sequence(), -1), Catch::Contains("negative"));
}

TEST_CASE("rewind to 0 empties the sequence and frees its blocks", "[cache][rewind]") {
    KvCacheManager m(8, 4);
    const SeqId s = m.create_sequence();
    append(m, s, 10);
    m.rewind_to(s, 0);
    m.check_invariants();
    CHECK(m.length(s) == 0);
    CHECK(m.block_table(s).empty());
    CHECK(m.chain(s).empty());
    CHECK(m.pool().num_used() == 0);
    // The sequence starts over: position 0 again, in a block of its own.
    const auto slots = append(m, s, token_run(3, 500));
    CHECK(m.length(s) == 3);
    CHECK(slots[0] == int64_t{m.block_table(s)[0]} * 4);
}

TEST_CASE("rewind to a block boundary releases the blocks past it", "[cache][rewind]") {
    KvCacheManager m(8, 4);
    const SeqId s = m.create_sequence();
    append(m, s, 10);  // blocks: full, full, 2 of 4
    const std::vector<int32_t> before = m.block_table(s);
    m.rewind_to(s, 8);
    m.check_invariants();
    CHECK(m.length(s) == 8);
    CHECK(m.block_table(s) == std::vector<int32_t>(before.begin(), before.begin() + 2));
    CHECK(m.pool().num_used() == 2);
    CHECK(m.blocks_needed(s, 1) == 1);  // position 8 starts a new block: nothing to copy
    std::vector<BlockCopy> copies;
    const auto slots = append(m, s, 1, &copies);
    CHECK(copies.empty());
    CHECK(slots[0] == int64_t{m.block_table(s)[2]} * 4);
}

TEST_CASE("rewind inside a block keeps it and writes in place when no one else holds it", "[cache][rewind]") {
    KvCacheManager m(8, 4);
    const SeqId s = m.create_sequence();
    append(m, s, 10);
    const std::vector<int32_t> before = m.block_table(s);
    m.rewind_to(s, 6);
    m.check_invariants();
    CHECK(m.length(s) == 6);
    CHECK(m.block_table(s) == std::vector<int32_t>(before.begin(), before.begin() + 2));
    CHECK(m.chain(s).size() == 1);
    std::vector<BlockCopy> copies;
    const auto slots = append(m, s, 1, &copies);
    CHECK(copies.empty());
    CHECK(slots[0] == int64_t{before[1]} * 4 + 2);
}

TEST_CASE("rewind never writes a block another sequence holds", "[cache][rewind]") {
    KvCacheManager m(8, 4);
    const SeqId a = m.create_sequence();
    append(m, a, 12);
    const SeqId b = m.fork(a);
    const std::vector<int32_t> a_table = m.block_table(a);
    m.rewind_to(b, 6);  // b now sees 2 of block 1's 4 slots; a still sees all of them
    m.check_invariants();
    CHECK(m.block_table(a) == a_table);
    CHECK(m.length(a) == 12);
    CHECK(m.pool().ref_count(a_table[0]) == 2);
    CHECK(m.pool().ref_count(a_table[1]) == 2);
    CHECK(m.pool().ref_count(a_table[2]) == 1);
    std::vector<BlockCopy> copies;
    const auto slots = append(m, b, 1, &copies);
    REQUIRE(copies.size() == 1);
    CHECK(copies[0].src == a_table[1]);
    CHECK(slots[0] == int64_t{copies[0].dst} * 4 + 2);
    CHECK(m.block_table(a) == a_table);
    CHECK(m.pool().ref_count(a_table[1]) == 1);
}

TEST_CASE("rewind out of range is refused and changes nothing", "[cache][rewind]") {
    KvCacheManager m(8, 4);
    const SeqId s = m.create_sequence();
    append(m, s, 10);
    const std::vector<int32_t> table = m.block_table(s);
    CHECK_THROWS_WITH(m.rewind_to(s, 11), Catch::Contains("cannot rewind sequence 0 to 11 tokens: it holds 10"));
    CHECK_THROWS_WITH(m.rewind_to(s, -1), Catch::Contains("cannot rewind sequence 0 to -1 tokens"));
    CHECK_THROWS_WITH(m.rewind_to(7, 0), Catch::Contains("no sequence with id 7"));
    m.check_invariants();
    CHECK(m.length(s) == 10);
    CHECK(m.block_table(s) == table);
    m.rewind_to(s, 10);  // to its own length: a no-op
    m.check_invariants();
    CHECK(m.block_table(s) == table);
}

TEST_CASE("exhaustion is all-or-nothing when cached blocks stand in for free ones", "[cache][prefix]") {
    KvCacheManager m(4, 4);
    const SeqId a = m.create_sequence();
    append(m, a, 8);  // two full blocks, registered
    m.free_sequence(a);
    const SeqId b = m.create_sequence();
    append(m, b, 4);  // takes a free block; the two cached ones stay
    CHECK(m.pool().num_cached() == 2);
    const std::vector<int32_t> lru = m.pool().lru_order();
    std::vector<int64_t> slots(16);
    std::vector<BlockCopy> copies;
    CHECK_THROWS_WITH(m.append_slots(b, token_run(16, 7), slots.data(), copies),
                      Catch::Contains("need 4 more blocks of 4 tokens but 3 of 4 are free"));
    m.check_invariants();
    CHECK(m.length(b) == 4);
    CHECK(m.pool().lru_order() == lru);  // nothing evicted
    CHECK(m.prefix_index().num_registered() == 3);
    append(m, b, 12);  // three blocks: the free one, then both cached ones, evicted
    CHECK(m.pool().num_available() == 0);
    CHECK(m.prefix_index().num_registered() == 4);  // b's own four full blocks
}

TEST_CASE("usage counts blocks in use, shared, cached, free and wasted slots", "[cache]") {
    KvCacheManager m(8, 4);
    const SeqId a = m.create_sequence();
    append(m, a, 10);  // full, full, 2 of 4
    const SeqId b = m.fork(a);
    append(m, b, 1);  // b's tail is a copy holding 3 of 4
    const KvCacheUsage u = m.usage(1000);
    CHECK(u.block_size == 4);
    CHECK(u.blocks_total == 8);
    CHECK(u.blocks_in_use == 4);
    CHECK(u.blocks_shared == 2);
    CHECK(u.blocks_cached == 0);
    CHECK(u.blocks_free == 4);
    CHECK(u.slots_wasted == 2 + 1);
    CHECK(u.bytes_in_use() == 4000);
    CHECK(u.bytes_shared() == 2000);
    CHECK(u.bytes_wasted() == 750);
    CHECK(u.bytes_total() == 8000);

    m.free_sequence(a);
    m.free_sequence(b);
    const KvCacheUsage after = m.usage(1000);
    CHECK(after.blocks_in_use == 0);
    CHECK(after.blocks_cached == 2);  // the two full blocks, findable by their chain
    CHECK(after.blocks_free == 6);
    CHECK(after.slots_wasted == 0);
}
