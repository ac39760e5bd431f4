// Cache operations through the engine, on real models: rewind and prefix reuse must give the logits ONNX
// Runtime gives for the same tokens, as if the sequence had been computed from scratch.
#include <algorithm>
#include <catch2/catch.hpp>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/runtime/engine.h"
#include "fixtures.h"
#include "kernels/error.h"

using namespace kvx;
using namespace kvx::test;

namespace {

Engine make_engine(const Model& model, int32_t block_size, int32_t num_blocks = 0) {
    EngineOptions o;
    o.block_size = block_size;
    o.num_blocks = num_blocks;
    return Engine(model.config, std::make_unique<cpu::CpuBackend>(model, cpu::cpu_kernels(cpu::best_simd_level())), o);
}

// Relative error of logits rows [first, first + rows) against ONNX Runtime's rows for those positions.
double worst_against_ort(const Fixture& f, const std::vector<float>& logits, size_t first, size_t rows) {
    const size_t vocab = static_cast<size_t>(f.vocab);
    double worst = 0;
    for (size_t r = 0; r < rows; ++r)
        worst = std::max(worst, relative_max_error(&logits[r * vocab], &f.ref_logits[(first + r) * vocab], vocab));
    return worst;
}

// Feeds tokens[from, to) one at a time, returning the worst error against ONNX Runtime.
double decode_against_ort(Engine& engine, SeqId seq, const Fixture& f, size_t from, size_t to) {
    const std::span<const int32_t> tokens(f.tokens);
    double worst = 0;
    for (size_t p = from; p < to; ++p)
        worst = std::max(worst, worst_against_ort(f, engine.forward({{seq, tokens.subspan(p, 1), false}}), p, 1));
    return worst;
}

// Tokens the fixture never has at these positions: what a rejected draft leaves in the cache.
std::vector<int32_t> wrong_tokens(const Fixture& f, size_t from, size_t n) {
    std::vector<int32_t> t;
    for (size_t i = 0; i < n; ++i) t.push_back((f.tokens[from + i] + 1 + static_cast<int32_t>(i)) % f.vocab);
    return t;
}

}  // namespace

TEST_CASE("after a rewind the engine gives ONNX Runtime's logits for the tokens fed again", "[engine][rewind][ort]") {
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        // A windowed model refuses rewinds into what its window released (window_test.cpp tests those).
        if (model.config.sliding_window > 0) continue;
        for (int32_t bs : {1, 4, 16}) {
            Engine engine = make_engine(model, bs);
            const std::span<const int32_t> tokens(f.tokens);
            const size_t n = tokens.size(), half = static_cast<size_t>(f.n_prefill);
            const SeqId s = engine.new_sequence();
            engine.forward({{s, tokens.first(half), false}});
            // Rejected drafts: six wrong tokens, then back to the prefill. Then an edit back to a block
            // boundary and to the middle of a block; then to 0 and a fresh prefill.
            engine.forward({{s, wrong_tokens(f, half, 6), true}});
            engine.rewind(s, static_cast<int32_t>(half));
            const double after_draft = decode_against_ort(engine, s, f, half, n);
            engine.rewind(s, 8);
            const double at_boundary = decode_against_ort(engine, s, f, 8, 12);
            engine.rewind(s, 10);
            const double in_block = decode_against_ort(engine, s, f, 10, 14);
            // The logits after position 13 were never kept: replaying token 13 gives them again.
            engine.rewind(s, 13);
            const double replayed = decode_against_ort(engine, s, f, 13, 14);
            engine.rewind(s, 0);
            CHECK(engine.length(s) == 0);
            const double restarted = worst_against_ort(f, engine.forward({{s, tokens.first(half), true}}), 0, half);
            engine.cache().check_invariants();
            INFO(f.name << " block size " << bs << ": after drafts " << after_draft << ", at a boundary " << at_boundary
                        << ", inside a block " << in_block << ", replayed " << replayed << ", restarted " << restarted);
            CHECK(std::max({after_draft, at_boundary, in_block, replayed, restarted}) <= f.tolerance);
            engine.free_sequence(s);
            CHECK(engine.cache().pool().num_used() == 0);
        }
    }
}

TEST_CASE("a rewound fork never disturbs the sequence it shares blocks with", "[engine][rewind][ort]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    Engine engine = make_engine(model, 4);
    const std::span<const int32_t> tokens(f.tokens);
    const size_t half = static_cast<size_t>(f.n_prefill);
    const SeqId a = engine.new_sequence();
    engine.forward({{a, tokens.first(half - 2), false}});  // ends inside a block: the tail is shared by the fork
    const SeqId b = engine.fork_sequence(a);
    engine.forward({{b, wrong_tokens(f, half - 2, 5), false}});
    engine.rewind(b, static_cast<int32_t>(half - 5));  // into a block a still holds
    double worst_b = decode_against_ort(engine, b, f, half - 5, half + 4);
    double worst_a = decode_against_ort(engine, a, f, half - 2, half + 4);
    engine.cache().check_invariants();
    INFO("fork " << worst_b << ", original " << worst_a);
    CHECK(worst_b <= 1e-4);
    CHECK(worst_a <= 1e-4);
}

TEST_CASE("a prompt starting with cached blocks skips them and gives ONNX Runtime's logits", "[engine][prefix][ort]") {
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        Engine engine = make_engine(model, 4, 64);  // room for two sequences
        const std::span<const int32_t> tokens(f.tokens);
        const size_t n = tokens.size(), half = static_cast<size_t>(f.n_prefill);

        // A first request computes the prompt's first half and goes away: its full blocks stay cached.
        const SeqId first = engine.new_sequence();
        engine.forward({{first, tokens.first(half), false}});
        engine.free_sequence(first);
        CHECK(engine.cache_usage().blocks_cached == static_cast<int32_t>(half / 4));

        // The next request with a longer prompt reuses them, and only computes the rest.
        const SequenceStart second = engine.start_sequence(tokens);
        CHECK(second.cached_tokens == static_cast<int32_t>(half / 4 * 4));
        const size_t skip = static_cast<size_t>(second.cached_tokens);
        const double reused = worst_against_ort(f, engine.forward({{second.seq, tokens.subspan(skip), true}}), skip, n - skip);

        // A third request while the second still runs shares its blocks, every one but the last prompt token's.
        const SequenceStart third = engine.start_sequence(tokens.first(n - 3));
        // (n - 4 when n - 3 is whole blocks: the last token is computed again, into a copy of the shared block.)
        CHECK(third.cached_tokens == static_cast<int32_t>(std::min((n - 3) / 4 * 4, n - 4)));
        CHECK(engine.cache_usage().blocks_shared == (third.cached_tokens + 3) / 4);
        const size_t skip3 = static_cast<size_t>(third.cached_tokens);
        const double shared = worst_against_ort(
            f, engine.forward({{third.seq, tokens.subspan(skip3, n - 3 - skip3), true}}), skip3, n - 3 - skip3);
        engine.cache().check_invariants();
        INFO(f.name << ": reused " << reused << ", shared " << shared);
        CHECK(reused <= f.tolerance);
        CHECK(shared <= f.tolerance);
        engine.free_sequence(second.seq);
        engine.free_sequence(third.seq);
        CHECK(engine.cache().pool().num_used() == 0);
    }
}

TEST_CASE("a prompt cached whole computes only its last token and gives ONNX Runtime's logits", "[engine][prefix][ort]") {
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        Engine engine = make_engine(model, 4, 64);
        const size_t len = static_cast<size_t>(f.n_prefill) / 4 * 4;  // whole blocks of 4
        REQUIRE((len >= 4 && len < f.tokens.size()));
        const std::span<const int32_t> prompt = std::span<const int32_t>(f.tokens).first(len);
        const SeqId first = engine.new_sequence();
        engine.forward({{first, prompt, false}});
        engine.free_sequence(first);

        // Alone on the cached blocks: the last token is written again in place.
        const SequenceStart alone = engine.start_sequence(prompt);
        CHECK(alone.cached_tokens == static_cast<int32_t>(len - 1));
        const double in_place = worst_against_ort(f, engine.forward({{alone.seq, prompt.last(1), true}}), len - 1, 1);
        // Beside it, sharing every block: the last token goes into a copy of the last block.
        const SequenceStart beside = engine.start_sequence(prompt);
        CHECK(beside.cached_tokens == static_cast<int32_t>(len - 1));
        const double copied = worst_against_ort(f, engine.forward({{beside.seq, prompt.last(1), true}}), len - 1, 1);
        // Both go on from there as a full prefill would.
        const double next = worst_against_ort(
            f, engine.forward({{alone.seq, std::span<const int32_t>(f.tokens).subspan(len, 1), true}}), len, 1);
        engine.cache().check_invariants();
        INFO(f.name << ": in place " << in_place << ", copied " << copied << ", next " << next);
        CHECK(in_place <= f.tolerance);
        CHECK(copied <= f.tolerance);
        CHECK(next <= f.tolerance);
        engine.free_sequence(alone.seq);
        engine.free_sequence(beside.seq);
        CHECK(engine.cache().pool().num_used() == 0);
    }
}

TEST_CASE("a cached prefix the pool needed back is computed again, not read stale", "[engine][prefix][ort]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const std::span<const int32_t> tokens(f.tokens);
    const size_t n = tokens.size();
    Engine engine = make_engine(model, 4, static_cast<int32_t>(n / 4));
    const SeqId first = engine.new_sequence();
    engine.forward({{first, tokens.first(16), false}});
    engine.free_sequence(first);
    // Other tokens fill the whole pool: every cached block is evicted and overwritten.
    const SeqId other = engine.new_sequence();
    engine.forward({{other, wrong_tokens(f, 0, n), false}});
    engine.free_sequence(other);
    const SequenceStart again = engine.start_sequence(tokens);
    CHECK(again.cached_tokens == 0);
    CHECK(worst_against_ort(f, engine.forward({{again.seq, tokens, true}}), 0, n) <= 1e-4);
}

TEST_CASE("engine rewinds out of range are refused by name", "[engine][rewind][errors]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    Engine engine = make_engine(model, 16);
    const SeqId s = engine.new_sequence();
    engine.forward({{s, std::span<const int32_t>(f.tokens).first(5), false}});
    CHECK_THROWS_WITH(engine.rewind(s, 6), Catch::Contains("cannot rewind sequence 0 to 6 tokens: it holds 5"));
    CHECK_THROWS_WITH(engine.rewind(s, -2), Catch::Contains("cannot rewind sequence 0 to -2 tokens"));
    CHECK_THROWS_WITH(engine.rewind(-1, 0), Catch::Contains("no sequence with id -1"));
    CHECK(engine.length(s) == 5);
}
