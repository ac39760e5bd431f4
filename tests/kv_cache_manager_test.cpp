// The cache manager alone: no model, no kernels, no memory behind the blocks. Every test runs the invariant
// checker after every operation.
#include <catch2/catch.hpp>
#include <algorithm>
#include <random>
#include <vector>

#include "engine/error.h"
#include "engine/kv_cache_manager.h"

using namespace kvx;

namespace {

// Appends n positions and returns their slots, checking the invariants afterwards.
std::vector<int64_t> append(KvCacheManager& m, SeqId seq, int32_t n, std::vector<BlockCopy>* copies = nullptr) {
    std::vector<int64_t> slots(static_cast<size_t>(n));
    std::vector<BlockCopy> local;
    m.append_slots(seq, n, slots.data(), copies ? *copies : local);
    m.check_invariants();
    return slots;
}

}  // namespace

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
        CHECK(m.pool().num_free() == 64);
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
        m.append_slots(b, 16, slots.data(), copies);
        FAIL("expected an exhausted pool");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("KV cache pool exhausted") && Catch::Contains("need 2 more blocks") &&
                                 Catch::Contains("1 of 4 are free"));
    }
    m.check_invariants();
    CHECK(m.length(b) == 0);
    CHECK(m.block_table(b).empty());
    CHECK(m.pool().num_free() == 1);
    append(m, b, 8);  // what fits still works
    m.free_sequence(a);
    m.free_sequence(b);
    m.check_invariants();
    CHECK(m.pool().num_free() == 4);
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
    CHECK_THROWS_WITH(m.append_slots(c, 1, slot.data(), copies), Catch::Contains("exhausted"));
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

TEST_CASE("random create, fork, append and free keep the invariants and leak nothing", "[cache]") {
    for (int32_t bs : {1, 4, 16}) {
        std::mt19937 rng(1234u + static_cast<unsigned>(bs));
        KvCacheManager m(64, bs);
        std::vector<SeqId> live;
        for (int op = 0; op < 5000; ++op) {
            const int kind = static_cast<int>(rng() % 4);
            if (kind == 0 || live.empty()) {
                live.push_back(m.create_sequence());
            } else {
                const SeqId s = live[rng() % live.size()];
                if (kind == 1) {
                    live.push_back(m.fork(s));
                } else if (kind == 2) {
                    const int32_t n = static_cast<int32_t>(rng() % (3 * static_cast<unsigned>(bs) + 1));
                    std::vector<int64_t> slots(static_cast<size_t>(n));
                    std::vector<BlockCopy> copies;
                    const int32_t free_before = m.pool().num_free(), len_before = m.length(s);
                    try {
                        m.append_slots(s, n, slots.data(), copies);
                        CHECK(m.length(s) == len_before + n);
                        for (int32_t i = 0; i < n; ++i) {
                            const int64_t slot = slots[static_cast<size_t>(i)];
                            const int32_t pos = len_before + i;
                            CHECK(slot == int64_t{m.block_table(s)[static_cast<size_t>(pos / bs)]} * bs + pos % bs);
                            CHECK(m.pool().ref_count(static_cast<int32_t>(slot / bs)) == 1);  // never write a shared block
                        }
                    } catch (const Error&) {
                        CHECK(m.pool().num_free() == free_before);
                        CHECK(m.length(s) == len_before);
                    }
                } else {
                    m.free_sequence(s);
                    live.erase(std::find(live.begin(), live.end(), s));
                }
            }
            m.check_invariants();
        }
        for (SeqId s : live) m.free_sequence(s);
        m.check_invariants();
        CHECK(m.pool().num_free() == 64);
    }
}
