// Layer groups: a model mixing full-attention and sliding-window layers keeps one pool and one table per
// group, in lockstep. The full group holds every block; the windowed group stays bounded; every operation
// is all-or-nothing across groups.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/cache/kv_cache_groups.h"
#include "kernels/error.h"
#include "kv_cache_support.h"

using namespace kvx;
using namespace kvx::test;

namespace {

// Block size 4: group 0 full attention on layer 3, group 1 a window of 8 on layers 0 1 2 4 5.
KvCacheGroups mixed(int32_t full_blocks, int32_t window_blocks, int32_t window = 8) {
    return KvCacheGroups(4, layer_groups(6, window, {0, 1, 2, 4, 5}, full_blocks, window_blocks));
}

// Appends tokens to every group and checks that group g's slots follow group g's table.
void append_all(KvCacheGroups& c, SeqId seq, const std::vector<int32_t>& tokens) {
    const int32_t start = c.length(seq);
    std::vector<int64_t> slots(c.num_groups() * tokens.size());
    std::vector<std::vector<BlockCopy>> copies;
    c.append_slots(seq, tokens, slots.data(), copies);
    c.check_invariants();
    for (size_t g = 0; g < c.num_groups(); ++g)
        for (size_t i = 0; i < tokens.size(); ++i) {
            const int32_t p = start + static_cast<int32_t>(i);
            CHECK(slots[g * tokens.size() + i] == int64_t{c.block_table(seq, g)[static_cast<size_t>(p / 4)]} * 4 + p % 4);
        }
}

struct State {
    std::vector<int32_t> lengths;
    std::vector<std::vector<int32_t>> tables;
    std::vector<int32_t> used;
    bool operator==(const State&) const = default;
};

State state(const KvCacheGroups& c, SeqId seq) {
    State s;
    for (size_t g = 0; g < c.num_groups(); ++g) {
        s.lengths.push_back(c.group(g).length(seq));
        s.tables.push_back(c.block_table(seq, g));
        s.used.push_back(c.group(g).pool().num_used());
    }
    return s;
}

}  // namespace

TEST_CASE("layer groups split a model's layers by attention span", "[cache][groups]") {
    const auto groups = layer_groups(6, 8, {5, 0, 1, 2, 4}, 64, 8);
    REQUIRE(groups.size() == 2);
    CHECK(groups[0].window == 0);
    CHECK(groups[0].layers == std::vector<int32_t>{3});
    CHECK(groups[0].num_blocks == 64);
    CHECK(groups[1].window == 8);
    CHECK(groups[1].layers == std::vector<int32_t>{0, 1, 2, 4, 5});
    CHECK(groups[1].num_blocks == 8);

    const auto all_windowed = layer_groups(2, 16, {0, 1}, 64, 8);
    REQUIRE(all_windowed.size() == 1);
    CHECK(all_windowed[0].window == 16);
    const auto all_full = layer_groups(2, 0, {}, 64, 8);
    REQUIRE(all_full.size() == 1);
    CHECK(all_full[0].window == 0);
    CHECK(all_full[0].layers == std::vector<int32_t>{0, 1});

    CHECK_THROWS_WITH(layer_groups(6, 8, {6}, 64, 8), Catch::Contains("layer 6 is out of range for a model of 6 layers"));
    CHECK_THROWS_WITH(layer_groups(6, 8, {1, 1}, 64, 8), Catch::Contains("layer 1 is listed twice"));
    CHECK_THROWS_WITH(layer_groups(6, 0, {1}, 64, 8), Catch::Contains("sliding window of 0 tokens is invalid"));
    CHECK_THROWS_WITH(KvCacheGroups(4, {}), Catch::Contains("at least one layer group"));
    CHECK_THROWS_WITH(KvCacheGroups(4, {{0, 8, {0, 1}}, {4, 8, {1}}}), Catch::Contains("layer 1 is in two KV cache groups"));
    const KvCacheGroups c = mixed(8, 8);
    CHECK(c.group_of_layer(3) == 0);
    CHECK(c.group_of_layer(4) == 1);
    CHECK_THROWS_WITH(c.group_of_layer(6), Catch::Contains("layer 6 is in no KV cache group"));
}

TEST_CASE("the full group keeps every block while the windowed group stays bounded", "[cache][groups][window]") {
    KvCacheGroups c = mixed(64, 3);  // window 8 over blocks of 4: at most ceil(8 / 4) + 1 = 3 blocks
    const SeqId s = c.create_sequence();
    for (int32_t p = 0; p < 200; ++p) append_all(c, s, {p % 7});
    CHECK(c.length(s) == 200);
    CHECK(c.group(0).pool().num_used() == 50);
    CHECK(c.group(1).pool().num_used() <= 3);
    CHECK(released_blocks(c.group(0), s) == 0);
    CHECK(released_blocks(c.group(1), s) == (199 - 7) / 4);

    // Bytes: a full-group block holds one layer's K/V, a windowed one five layers'.
    const std::vector<size_t> bytes = {1000, 5000};
    const auto u = c.usage(bytes);
    REQUIRE(u.size() == 2);
    CHECK(u[0].bytes_in_use() == 50 * 1000);
    CHECK(u[1].bytes_in_use() == static_cast<size_t>(c.group(1).pool().num_used()) * 5000);
    c.free_sequence(s);
    c.check_invariants();
    CHECK(c.group(0).pool().num_used() == 0);
    CHECK(c.group(1).pool().num_used() == 0);
}

TEST_CASE("a pool short in one group changes no group", "[cache][groups]") {
    // A sequence of `have` tokens, then `more` in one pass that some group's pool cannot take.
    auto check_refused = [](KvCacheGroups c, int32_t have, int32_t more, const std::string& message) {
        const SeqId s = c.create_sequence();
        append_all(c, s, token_run(have));
        const State before = state(c, s);
        std::vector<int64_t> slots(c.num_groups() * static_cast<size_t>(more));
        std::vector<std::vector<BlockCopy>> copies;
        CHECK_THROWS_WITH(c.append_slots(s, token_run(more, have), slots.data(), copies), Catch::Contains(message));
        c.check_invariants();
        CHECK(state(c, s) == before);
    };
    check_refused(mixed(3, 16), 8, 8, "KV cache pool exhausted in layer group 0: need 2 more blocks but 1 of 3");
    // Positions 4..11 in one pass: the query at 4 still needs block 0, so the chunk needs two more.
    check_refused(mixed(16, 2), 4, 8, "in layer group 1: need 2 more blocks but 1 of 2");
}

TEST_CASE("a rewind the windowed group refuses changes no group", "[cache][groups][rewind]") {
    KvCacheGroups c = mixed(64, 8);
    const SeqId s = c.create_sequence();
    for (int32_t p = 0; p < 40; ++p) append_all(c, s, {p});
    const State before = state(c, s);
    CHECK_THROWS_WITH(c.rewind_to(s, 20), Catch::Contains("sliding window of 8 already released"));
    c.check_invariants();
    CHECK(state(c, s) == before);
    c.rewind_to(s, 39);  // the query at 39 needs keys 32..38, all held
    c.check_invariants();
    CHECK(c.length(s) == 39);
    CHECK(c.group(0).length(s) == 39);
    CHECK(c.group(0).pool().num_used() == 10);
}

TEST_CASE("a prefix hit is the longest prefix every group still has cached", "[cache][groups][prefix]") {
    const std::vector<int32_t> prompt = token_run(17, 100);
    SECTION("the windowed group's early blocks were evicted: no hit") {
        KvCacheGroups c = mixed(64, 4, 4);  // window 4: two blocks live, two spare
        const SeqId a = c.create_sequence();
        for (int32_t token : prompt) append_all(c, a, {token});
        c.free_sequence(a);
        CHECK(c.group(0).cached_prefix_blocks(prompt) == 4);
        CHECK(c.group(1).cached_prefix_blocks(prompt) == 0);  // block 0 was taken back for block 2 or later
        const SequenceStart start = c.start_sequence(prompt);
        c.check_invariants();
        CHECK(start.cached_tokens == 0);
        CHECK(c.length(start.seq) == 0);
        CHECK(c.group(0).pool().num_used() == 0);
    }
    SECTION("both groups have it: the full group holds every block, the windowed one the last") {
        KvCacheGroups c = mixed(64, 16, 4);
        const SeqId a = c.create_sequence();
        for (int32_t token : prompt) append_all(c, a, {token});
        c.free_sequence(a);
        const SequenceStart start = c.start_sequence(prompt);
        c.check_invariants();
        CHECK(start.cached_tokens == 16);
        CHECK(released_blocks(c.group(0), start.seq) == 0);
        CHECK(c.group(0).pool().num_used() == 4);
        CHECK(released_blocks(c.group(1), start.seq) == 3);
        CHECK(c.group(1).pool().num_used() == 1);
        append_all(c, start.seq, {prompt[16]});
    }
}

TEST_CASE("fork and free move every group together", "[cache][groups]") {
    KvCacheGroups c = mixed(32, 8);
    const SeqId a = c.create_sequence();
    append_all(c, a, token_run(10));
    const SeqId b = c.fork(a);
    c.check_invariants();
    append_all(c, b, {1});  // copy-on-write in both groups
    CHECK(c.num_sequences() == 2);
    CHECK_THROWS_WITH(c.free_sequence(9), Catch::Contains("no sequence with id 9"));
    c.check_invariants();
    c.free_sequence(a);
    c.free_sequence(b);
    c.check_invariants();
    CHECK(c.num_sequences() == 0);
}
