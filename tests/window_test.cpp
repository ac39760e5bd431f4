// Sliding-window attention end to end: a random Llama whose layers 0 and 2 see the last W = 7 positions and
// layer 1 all of them (tools/kvx_tools/fixtures/make_fixtures.py, HF's band mask in the ONNX graph), against ONNX
// Runtime running the same chunks with its past KV cache. The bugs other engines shipped are the cases: the
// window's edge, the total length reaching the window, chunks longer than the window on a cache, the windowed
// cache bounded over a long generation, rewinds into released positions, prefix reuse with a window.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/model/model_config.h"
#include "engine/runtime/engine.h"
#include "fixtures.h"
#include "kernels/error.h"

using namespace kvx;
using namespace kvx::test;

namespace {

const char* const kWindowFixture = "rand_window7_l3_hd12_v211";

Engine make_engine(const Model& model, const KernelTable& kernels, int32_t block_size, int32_t max_chunk = 0) {
    EngineOptions options;
    options.block_size = block_size;
    options.max_chunk = max_chunk;
    return Engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), options);
}

// The fixture's own run (a prefill, then decode steps) as a schedule too.
std::vector<ChunkSchedule> all_schedules(const Fixture& f) {
    std::vector<int32_t> decode(f.tokens.size() - static_cast<size_t>(f.n_prefill), 1);
    decode.insert(decode.begin(), f.n_prefill);
    std::vector<ChunkSchedule> all = {{"prefill_then_decode", decode, f.ref_logits}};
    all.insert(all.end(), f.chunk_schedules.begin(), f.chunk_schedules.end());
    return all;
}

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

TEST_CASE("a windowed model's config has its window and layer groups", "[window]") {
    const Model model = load_model(load_fixture(kWindowFixture).model_dir);
    CHECK(model.config.sliding_window == 7);
    CHECK(model.config.sliding_window_layers == std::vector<int>{0, 2});
    Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 4);
    const KvCacheGroups& groups = engine.cache_groups();
    REQUIRE(groups.num_groups() == 2);
    CHECK(groups.spec(0).window == 0);
    CHECK(groups.spec(0).layers == std::vector<int32_t>{1});
    CHECK(groups.spec(1).window == 7);
    CHECK(groups.spec(1).layers == std::vector<int32_t>{0, 2});
    // A block of a group holds its layers' K and V only.
    const size_t per_layer = 2 * size_t{2} * 4 * 12 * sizeof(float);  // K and V, 2 kv heads x 4 tokens x 12
    CHECK(engine.plan().kv().bytes_per_block(0) == per_layer);
    CHECK(engine.plan().kv().bytes_per_block(1) == 2 * per_layer);
}

TEST_CASE("windowed logits match ONNX Runtime for every chunk schedule and block size", "[window][ort]") {
    const Fixture f = load_fixture(kWindowFixture);
    const Model model = load_model(f.model_dir);
    REQUIRE(f.chunk_schedules.size() >= 3);
    const size_t vocab = static_cast<size_t>(f.vocab);
    const int32_t window = model.config.sliding_window;
    for (const ChunkSchedule& schedule : all_schedules(f)) {
        for (int32_t bs : {1, 4, 16, 64}) {
            Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), bs);
            int32_t chunk = 0;
            size_t pass = 0;
            const auto logits = run_chunks(engine, f.tokens, schedule.chunks, [&](SeqId seq, int32_t length) {
                chunk = schedule.chunks[pass++];
                engine.cache_groups().check_invariants();
                // The windowed group holds what the pass's first query needed, and at most the documented bound.
                const int32_t first_query = length - chunk;
                const int32_t held = engine.cache_groups().group(1).pool().num_used();
                CHECK(held == ceil_div(length, bs) - std::max(0, first_query - window + 1) / bs);
                CHECK(held <= ceil_div(window - 1 + chunk, bs) + 1);
                CHECK(engine.cache_groups().group(0).pool().num_used() == ceil_div(length, bs));
                (void)seq;
            });
            const double worst = worst_row_error(logits, schedule.ref_logits, vocab, 0, f.tokens.size());
            INFO(schedule.name << " at block size " << bs << ": worst max|kvx - ort| / max|ort| = " << worst);
            CHECK(worst <= f.tolerance);
        }
    }
}

TEST_CASE("every kernel table attends within the window", "[window][ort]") {
    const Fixture f = load_fixture(kWindowFixture);
    const Model model = load_model(f.model_dir);
    const std::vector<ChunkSchedule> schedules = all_schedules(f);
    for (const KernelTable* kernels : every_kernel_table())
        for (const ChunkSchedule& schedule : schedules) {
            Engine engine = make_engine(model, *kernels, 4);
            const auto logits = run_chunks(engine, f.tokens, schedule.chunks);
            const double worst = worst_row_error(logits, schedule.ref_logits, static_cast<size_t>(f.vocab), 0,
                                                 f.tokens.size());
            INFO(kernels->name << ", " << schedule.name << ": worst " << worst);
            CHECK(worst <= f.tolerance);
        }
}

TEST_CASE("a generation of more than 10 windows keeps the windowed pool bounded", "[window][ort]") {
    const Fixture f = load_fixture(kWindowFixture);
    const Model model = load_model(f.model_dir);
    const int32_t bs = 4, window = model.config.sliding_window;
    REQUIRE(f.tokens.size() >= 10 * static_cast<size_t>(window));
    // The largest chunk is the prefill; the windowed pool is sized for it and no more.
    Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), bs, f.n_prefill);
    const int32_t bound = ceil_div(window - 1 + f.n_prefill, bs) + 1;
    REQUIRE(engine.cache_groups().group(1).pool().num_blocks() == bound);
    REQUIRE(engine.cache_groups().group(0).pool().num_blocks() == ceil_div(engine.context(), bs));
    int32_t peak_windowed = 0;
    const auto logits = run_chunks(engine, f.tokens, all_schedules(f).front().chunks, [&](SeqId, int32_t length) {
        const std::vector<KvCacheUsage> usage = engine.cache_usage_by_group();
        peak_windowed = std::max(peak_windowed, usage[1].blocks_in_use);
        CHECK(usage[0].blocks_in_use == ceil_div(length, bs));  // the full group grows with the sequence
        if (length > f.n_prefill) CHECK(usage[1].blocks_in_use <= ceil_div(window, bs) + 1);  // decode steps
    });
    CHECK(peak_windowed <= bound);
    CHECK(worst_row_error(logits, f.ref_logits, static_cast<size_t>(f.vocab), 0, f.tokens.size()) <= f.tolerance);
}

TEST_CASE("a windowed engine refuses to rewind into released positions and replays the rest", "[window][ort]") {
    const Fixture f = load_fixture(kWindowFixture);
    const Model model = load_model(f.model_dir);
    const size_t vocab = static_cast<size_t>(f.vocab);
    Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 4);
    const std::span<const int32_t> tokens(f.tokens);
    const SeqId seq = engine.new_sequence();
    engine.forward({{seq, tokens.first(20), false}});
    for (size_t i = 20; i < 30; ++i) engine.forward({{seq, tokens.subspan(i, 1), false}});
    // The query at 2 needs position 0, whose block the window released long ago.
    REQUIRE_THROWS_WITH(engine.rewind(seq, 2), Catch::Contains("sliding window"));
    CHECK(engine.length(seq) == 30);
    engine.cache_groups().check_invariants();
    // Rewinding within the window is fine, and the replayed tokens get ONNX Runtime's logits.
    engine.rewind(seq, 26);
    const auto& replayed = engine.forward({{seq, tokens.subspan(26, 4), true}});
    CHECK(worst_row_error(std::vector<float>(replayed.begin(), replayed.end()),
                          std::vector<float>(f.ref_logits.begin() + static_cast<std::ptrdiff_t>(26 * vocab),
                                             f.ref_logits.begin() + static_cast<std::ptrdiff_t>(30 * vocab)),
                          vocab, 0, 4) <= f.tolerance);
    engine.cache_groups().check_invariants();
}

TEST_CASE("prefix reuse on a windowed model gives ONNX Runtime's logits", "[window][ort]") {
    const Fixture f = load_fixture(kWindowFixture);
    const Model model = load_model(f.model_dir);
    const size_t vocab = static_cast<size_t>(f.vocab);
    const std::span<const int32_t> tokens(f.tokens);
    for (const bool keep_first : {true, false}) {
        INFO((keep_first ? "the first sequence slides on" : "the first sequence is freed"));
        Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 4);
        const SeqId first = engine.new_sequence();
        engine.forward({{first, tokens.first(40), false}});
        if (keep_first)  // slides past its early blocks, which the windowed group releases to the cache
            for (size_t i = 40; i < 60; ++i) engine.forward({{first, tokens.subspan(i, 1), false}});
        else
            engine.free_sequence(first);
        const SequenceStart start = engine.start_sequence(tokens.first(60));
        CHECK(start.cached_tokens > 0);
        engine.cache_groups().check_invariants();
        const size_t from = static_cast<size_t>(start.cached_tokens);
        const auto& logits = engine.forward({{start.seq, tokens.subspan(from, 60 - from), true}});
        CHECK(worst_row_error(std::vector<float>(logits.begin(), logits.end()),
                              std::vector<float>(f.ref_logits.begin() + static_cast<std::ptrdiff_t>(from * vocab),
                                                 f.ref_logits.begin() + static_cast<std::ptrdiff_t>(60 * vocab)),
                              vocab, 0, 60 - from) <= f.tolerance);
        engine.cache_groups().check_invariants();
    }
}

TEST_CASE("an engine refuses a chunk longer than its largest", "[window]") {
    const Fixture f = load_fixture(kWindowFixture);
    const Model model = load_model(f.model_dir);
    Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 4, 5);
    const SeqId seq = engine.new_sequence();
    REQUIRE_THROWS_WITH(engine.forward({{seq, std::span<const int32_t>(f.tokens).first(6), false}}),
                        Catch::Contains("exceeds the engine's largest chunk of 5"));
    CHECK(engine.length(seq) == 0);
    engine.cache_groups().check_invariants();
}

TEST_CASE("the loader refuses a malformed sliding_window", "[window]") {
    namespace fs = std::filesystem;
    const Fixture f = load_fixture(kWindowFixture);
    std::ifstream in(f.model_dir + "/config.json");
    const nlohmann::json good = nlohmann::json::parse(in);
    const fs::path dir = fs::temp_directory_path() / ("kvx_window_config_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::vector<std::pair<nlohmann::json, std::string>> cases = {
        {7, "'sliding_window' must be an object, not 7"},
        {{{"window", 0}, {"layers", {0}}}, "'sliding_window.window' must be an integer from 1 to 1073741824, not 0"},
        {{{"window", 2.5}, {"layers", {0}}}, "'sliding_window.window' must be an integer from 1 to 1073741824, not 2.5"},
        {{{"layers", {0}}}, "'sliding_window.window' is missing"},
        {{{"window", 7}, {"layers", {0, 3}}}, "'sliding_window.layers' must be an integer from 0 to 2, not 3"},
        {{{"window", 7}, {"layers", {2, 0}}}, "ascending and list each layer once"},
        {{{"window", 7}, {"layers", {0, 0}}}, "ascending and list each layer once"},
        {{{"window", 7}, {"layers", nlohmann::json::array()}}, "lists no layer"},
        {{{"window", 7}, {"layers", {"0"}}}, "must be an integer from 0 to 2, not \"0\""},
    };
    for (const auto& [window, expected] : cases) {
        nlohmann::json config = good;
        config["sliding_window"] = window;
        std::ofstream(dir / "config.json") << config.dump();
        INFO(window.dump());
        CHECK_THROWS_WITH(load_model_config(dir.string()), Catch::Contains("sliding_window") && Catch::Contains(expected));
    }
    fs::remove_all(dir);
}
