// Beam search over the paged cache against tools/kvx_tools/fixtures/beam_search_reference.py: numpy driving ONNX
// Runtime with a contiguous past per beam that it physically reorders each step. Same hypotheses, token
// for token, with scores within 1e-4; every block back in the pool afterwards; and the beams really share
// blocks instead of each holding a copy.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/generation/beam_search.h"
#include "engine/runtime/sampler.h"
#include "fixtures.h"
#include "kernels/error.h"

using namespace kvx;
using namespace kvx::test;

namespace {

struct BeamCase {
    std::string name, fixture;
    std::vector<int32_t> prompt;
    BeamSearchOptions options;
    std::vector<BeamHypothesis> hypotheses;  // ONNX Runtime's, best first
};

std::vector<BeamCase> load_beam_cases() {
    const std::string path = std::string(std::getenv("KVX_FIXTURES") ? std::getenv("KVX_FIXTURES") : "") +
                             "/beam/cases.json";
    std::ifstream file(path);
    if (!file) FAIL(path << " is missing: run the tests through ctest, whose fixtures_beam step writes it");
    std::vector<BeamCase> cases;
    for (const auto& c : nlohmann::json::parse(file)) {
        BeamCase bc;
        bc.name = c.at("name").get<std::string>();
        bc.fixture = c.at("fixture").get<std::string>();
        bc.prompt = c.at("prompt").get<std::vector<int32_t>>();
        bc.options.num_beams = c.at("num_beams").get<int32_t>();
        bc.options.length_penalty = c.at("length_penalty").get<float>();
        bc.options.max_new_tokens = c.at("max_new_tokens").get<int32_t>();
        bc.options.stop_token_ids = c.at("stop_token_ids").get<std::vector<int>>();
        for (const auto& h : c.at("hypotheses"))
            bc.hypotheses.push_back({h.at("tokens").get<std::vector<int32_t>>(), h.at("score").get<double>(),
                                     h.at("sum_logprobs").get<double>(), h.at("stopped_by_token").get<bool>()});
        cases.push_back(std::move(bc));
    }
    REQUIRE(cases.size() >= 30);
    return cases;
}

Engine make_engine(const Model& model, const KernelTable& kernels, int32_t block_size, int32_t num_blocks = 0) {
    EngineOptions o;
    o.block_size = block_size;
    o.num_blocks = num_blocks;
    return Engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), o);
}

// One thread unless OMP_NUM_THREADS says otherwise, as smollm2_main.cpp does: ctest runs tests side by side
// on two cores, where OpenMP's barriers stall (measured here: 0.8 s with one thread, 6-15 s with two under
// load). Thread counts are checked bit for bit in cpu_kernels_test.
void one_thread_unless_asked() {
    if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);
}

std::string tokens_text(const std::vector<int32_t>& tokens) {
    std::string s;
    for (int32_t t : tokens) s += std::to_string(t) + " ";
    return s;
}

// kvx's hypotheses against the reference's: the same set of token lists (order among near-equal scores
// is not decisive), each score within 1e-4 relative, and the same best one.
void check_hypotheses(const std::vector<BeamHypothesis>& got, const std::vector<BeamHypothesis>& want) {
    REQUIRE(got.size() == want.size());
    for (const BeamHypothesis& w : want) {
        INFO("reference hypothesis " << tokens_text(w.tokens) << "score " << w.score);
        const auto match =
            std::find_if(got.begin(), got.end(), [&](const BeamHypothesis& g) { return g.tokens == w.tokens; });
        REQUIRE(match != got.end());
        CHECK(std::fabs(match->score - w.score) <= 1e-4 * std::fabs(w.score));
        CHECK(match->stopped_by_token == w.stopped_by_token);
    }
    CHECK(got.front().tokens == want.front().tokens);
    for (size_t i = 1; i < got.size(); ++i) CHECK(got[i - 1].score >= got[i].score);
}

}  // namespace

TEST_CASE("beam search gives ONNX Runtime's hypotheses, and every block back", "[beam][ort]") {
    one_thread_unless_asked();
    const std::vector<BeamCase> cases = load_beam_cases();
    std::map<std::string, Model> models;
    const auto tables = every_kernel_table();
    const int32_t block_sizes[] = {4, 1, 16};
    for (size_t i = 0; i < cases.size(); ++i) {
        const BeamCase& c = cases[i];
        if (!models.count(c.fixture)) models.emplace(c.fixture, load_model(load_fixture(c.fixture).model_dir));
        const Model& model = models.at(c.fixture);
        // Every case on the best level; the oracle and the other levels take turns, to keep the test cheap.
        for (const KernelTable* kernels : {tables.back(), tables[i % tables.size()]}) {
            const int32_t bs = block_sizes[i % 3];
            INFO(c.name << " with " << kernels->name << ", block size " << bs);
            // The pool the search says it needs, and not a block more.
            const int64_t needed = beam_search_blocks_needed(static_cast<int64_t>(c.prompt.size()), c.options, bs);
            Engine engine = make_engine(model, *kernels, bs, static_cast<int32_t>(needed));
            const BeamSearchResult result = beam_search(engine, c.prompt, c.options);
            check_hypotheses(result.hypotheses, c.hypotheses);
            CHECK(engine.cache().num_sequences() == 0);
            CHECK(engine.cache_usage().blocks_in_use == 0);
            engine.cache().check_invariants();
            if (kernels == tables[i % tables.size()]) break;  // the best level drew itself
        }
    }
}

TEST_CASE("beams share their blocks: fewer in use than one copy per beam, copies only of partial blocks",
          "[beam]") {
    one_thread_unless_asked();
    const Model model = load_model(load_fixture("stories260K").model_dir);
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    const Fixture f = load_fixture("stories260K");
    const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.begin() + 40);
    for (int32_t n : {2, 8, 33}) {
        INFO(n << " beams");
        BeamSearchOptions o;
        o.num_beams = n;
        o.max_new_tokens = 24;
        const int32_t bs = 4;
        Engine engine = make_engine(model, kernels, bs, 4000);
        const BeamSearchResult r = beam_search(engine, prompt, o);
        REQUIRE(r.hypotheses.size() == static_cast<size_t>(n));
        const BeamSearchStats& s = r.stats;
        CHECK(s.decode_steps == o.max_new_tokens - 1);
        const int32_t blocks_per_beam = (s.max_beam_length + bs - 1) / bs;
        CHECK(s.peak_blocks_in_use < n * blocks_per_beam);
        CHECK(s.peak_blocks_in_use >= blocks_per_beam);
        // A step copies at most the partly filled last block of each forked beam.
        CHECK(s.blocks_copied > 0);
        CHECK(s.blocks_copied <= int64_t{n} * s.decode_steps);
        CHECK(s.bytes_copied < s.reorder_bytes);
        CHECK(s.peak_bytes_in_use < s.contiguous_bytes);
        CHECK(engine.cache_usage().blocks_in_use == 0);
        engine.cache().check_invariants();
    }
}

TEST_CASE("one beam is greedy decoding", "[beam]") {
    const Fixture f = load_fixture("rand_hd24_gqa4_l3_v301_untied");
    const Model model = load_model(f.model_dir);
    Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 16);
    const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.begin() + 5);
    BeamSearchOptions o;
    o.num_beams = 1;
    o.max_new_tokens = 20;
    const BeamSearchResult r = beam_search(engine, prompt, o);
    REQUIRE(r.hypotheses.size() == 1);
    // Greedy by argmax over raw logits, one token at a time.
    const SeqId seq = engine.new_sequence();
    const std::vector<float>* logits = &engine.forward({{seq, prompt, false}});
    std::vector<int32_t> greedy;
    for (int i = 0; i < o.max_new_tokens; ++i) {
        greedy.push_back(argmax(logits->data(), engine.vocab_size()));
        logits = &engine.forward({{seq, {&greedy.back(), 1}, false}});
    }
    engine.free_sequence(seq);
    CHECK(r.hypotheses[0].tokens == greedy);
}

TEST_CASE("beam search refuses impossible options before any work", "[beam][errors]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 16);
    const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.begin() + 8);
    auto refused = [&](BeamSearchOptions o, const std::string& message) {
        INFO(message);
        CHECK_THROWS_WITH(beam_search(engine, prompt, o), Catch::Contains(message));
        CHECK(engine.cache().num_sequences() == 0);
        CHECK(engine.cache_usage().blocks_in_use == 0);
    };
    BeamSearchOptions o;
    o.num_beams = 0;
    refused(o, "the number of beams must be from 1 to 64, not 0");
    o.num_beams = 65;
    refused(o, "the number of beams must be from 1 to 64, not 65");
    o.num_beams = 2;
    o.length_penalty = -0.5f;
    refused(o, "the length penalty must be a finite number >= 0");
    o.length_penalty = std::numeric_limits<float>::quiet_NaN();
    refused(o, "the length penalty must be a finite number >= 0");
    o.length_penalty = std::numeric_limits<float>::infinity();
    refused(o, "the length penalty must be a finite number >= 0");
    o.length_penalty = 1;
    o.max_new_tokens = 0;
    refused(o, "beam search needs at least one new token");
    o.max_new_tokens = engine.context();
    refused(o, "exceed the context of");
    // The default pool holds one sequence of the whole context: 64 beams of 500 tokens do not fit.
    o.num_beams = 64;
    o.max_new_tokens = 400;
    refused(o, "KV cache pool exhausted: 64 beams over 408 tokens may need");
    CHECK_THROWS_WITH(beam_search(engine, std::vector<int32_t>{}, BeamSearchOptions{}),
                      Catch::Contains("beam search needs a prompt"));
}

TEST_CASE("every token a stop token: the search ends at once, nothing left behind", "[beam]") {
    const Fixture f = load_fixture("rand_gpt2_hd24_l3_v263_ctx65");
    const Model model = load_model(f.model_dir);
    Engine engine = make_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 4, 200);
    const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.begin() + 6);
    for (int32_t n : {1, 7, 64}) {
        BeamSearchOptions o;
        o.num_beams = n;
        o.max_new_tokens = 10;
        for (int v = 0; v < f.vocab; ++v) o.stop_token_ids.push_back(v);
        const BeamSearchResult r = beam_search(engine, prompt, o);
        REQUIRE(r.hypotheses.size() == static_cast<size_t>(n));
        for (const BeamHypothesis& h : r.hypotheses) {
            CHECK(h.tokens.size() == 1);
            CHECK(h.stopped_by_token);
            CHECK(h.sum_logprobs < 0);  // a log-probability, not a raw logit
        }
        CHECK(r.stats.decode_steps == 0);
        CHECK(engine.cache().num_sequences() == 0);
        CHECK(engine.cache_usage().blocks_in_use == 0);
    }
}

TEST_CASE("prompts ending on, before and after a block boundary give the hypotheses of one big block",
          "[beam]") {
    // Forks of a prompt that fills its last block exactly share no partial block; one token more and every
    // fork copies it. Either way the beams must see the same history.
    const Fixture f = load_fixture("rand_hd24_gqa4_l3_v301_untied");
    const Model model = load_model(f.model_dir);
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    for (size_t len : {3, 4, 5, 7, 8, 9}) {
        const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.begin() + static_cast<std::ptrdiff_t>(len));
        BeamSearchOptions o;
        o.num_beams = 6;
        o.max_new_tokens = 9;
        Engine one_block = make_engine(model, kernels, 64, 12);
        const BeamSearchResult want = beam_search(one_block, prompt, o);
        Engine small_blocks = make_engine(model, kernels, 4, 200);
        const BeamSearchResult got = beam_search(small_blocks, prompt, o);
        INFO("prompt of " << len << " tokens");
        REQUIRE(got.hypotheses.size() == want.hypotheses.size());
        for (size_t i = 0; i < got.hypotheses.size(); ++i) {
            CHECK(got.hypotheses[i].tokens == want.hypotheses[i].tokens);
            const double score = want.hypotheses[i].score;
            CHECK(std::fabs(got.hypotheses[i].score - score) <= 1e-5 * std::fabs(score));
            for (size_t j = 0; j < i; ++j) CHECK(got.hypotheses[i].tokens != got.hypotheses[j].tokens);  // no beam twice
        }
        CHECK(small_blocks.cache_usage().blocks_in_use == 0);
    }
}
