// Speculative decoding against plain decoding, on real models: the same tokens, the same cache, the same
// logits after it. Plain decoding is the independent reference: its logits are proven against ONNX
// Runtime by model_vs_onnxruntime_test.cpp; speculative decoding must reproduce it bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/generation/generator.h"
#include "engine/generation/prompt_lookup.h"
#include "engine/generation/speculative.h"
#include "engine/runtime/engine.h"
#include "fixtures.h"
#include "kernels/error.h"

using namespace kvx;
using namespace kvx::test;

namespace {

// Token ids only: the tests compare the ids continue_sequence collects, not text.
class NoText final : public Tokenizer {
public:
    std::vector<int32_t> encode(std::string_view, bool) const override { return {}; }
    std::string decode(int32_t, int32_t) const override { return {}; }
};

const KernelTable& best_kernels() { return cpu::cpu_kernels(cpu::best_simd_level()); }

SamplerOptions greedy() {
    SamplerOptions s;
    s.temperature = 0.0f;
    return s;
}

// One generation on a fresh engine, and what it left behind.
struct Run {
    std::vector<int32_t> tokens;     // generated
    GenerationStats stats;
    int32_t length = 0;              // the sequence's cache length afterwards
    int32_t blocks_used = 0;         // while the sequence lives
    std::vector<float> next_logits;  // [vocab] after feeding one more token (the unappended one, else 1)
};

Run run_generation(const Model& model, const KernelTable& kernels, std::span<const int32_t> prompt,
                   const GenerationOptions& options, const SamplerOptions& sampling, int32_t context = 0) {
    EngineOptions engine_options;
    engine_options.context = context;
    Engine engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), engine_options);
    Sampler sampler(sampling);
    const NoText no_text;
    const SeqId seq = engine.new_sequence();
    Run r;
    r.stats = continue_sequence(engine, seq, no_text, sampler, prompt, options, [](std::string_view) {}, &r.tokens);
    engine.cache().check_invariants();
    r.length = engine.length(seq);
    r.blocks_used = engine.cache().pool().num_used();
    if (r.length < engine.context()) {
        const int32_t next[1] = {r.stats.unappended_token >= 0 ? r.stats.unappended_token : 1};
        r.next_logits = engine.forward({{seq, next, false}});
    }
    engine.free_sequence(seq);
    CHECK(engine.cache().pool().num_used() == 0);  // nothing leaked
    engine.cache().check_invariants();
    return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Everything plain decoding leaves must be what speculative decoding leaves.
void check_same_as_plain(const Run& plain, const Run& spec) {
    CHECK(spec.tokens == plain.tokens);
    CHECK(spec.stats.generated_tokens == plain.stats.generated_tokens);
    CHECK(spec.stats.stopped_by_token == plain.stats.stopped_by_token);
    CHECK(spec.stats.unappended_token == plain.stats.unappended_token);
    CHECK(spec.length == plain.length);
    CHECK(spec.blocks_used == plain.blocks_used);
    CHECK(same_bits(spec.next_logits, plain.next_logits));
}

GenerationOptions options_for(int32_t max_new, int32_t drafts, std::vector<int> stops = {}) {
    GenerationOptions o;
    o.max_new_tokens = max_new;
    o.speculative_drafts = drafts;
    o.stop_token_ids = std::move(stops);
    return o;
}

// A prompt that repeats itself, so prompt lookup finds matches from the start: BOS, then a fixture's
// first 8 tokens three times.
std::vector<int32_t> repetitive_prompt(const Fixture& f) {
    std::vector<int32_t> prompt = {f.tokens[0]};
    for (int copy = 0; copy < 3; ++copy) prompt.insert(prompt.end(), f.tokens.begin() + 1, f.tokens.begin() + 9);
    return prompt;
}

// stories260K's greedy story from BOS (48 tokens), then BOS and its first 6 tokens again: the model goes on
// retelling the story, so drafts copied from it are accepted for long runs, and rejected where it strays.
std::vector<int32_t> retelling_prompt(const Model& model) {
    const std::vector<int32_t> bos = {1};
    const Run story = run_generation(model, best_kernels(), bos, options_for(48, 0), greedy());
    std::vector<int32_t> prompt = bos;
    prompt.insert(prompt.end(), story.tokens.begin(), story.tokens.end());
    prompt.push_back(1);
    prompt.insert(prompt.end(), story.tokens.begin(), story.tokens.begin() + 6);
    return prompt;
}

// 120 tokens, or as many as the model's context leaves after the prompt (some fixtures have 64 positions).
int32_t tokens_to_generate(const Model& model, const std::vector<int32_t>& prompt) {
    return std::min(120, model.config.max_seq_len - static_cast<int32_t>(prompt.size()));
}

// Which generated tokens come out of a speculative run as accepted drafts, worked out from the greedy tokens
// and prompt lookup alone (greedy speculative output is plain greedy's): accepted[g] is true when token g
// equals the draft proposed for its position. Consecutive accepted tokens came in the same pass.
std::vector<bool> accepted_drafts(std::span<const int32_t> prompt, const std::vector<int32_t>& generated,
                                  int32_t max_drafts) {
    std::vector<bool> accepted(generated.size(), false);
    std::vector<int32_t> context(prompt.begin(), prompt.end()), drafts;
    size_t g = 1;  // token 0 comes from the prefill's logits
    context.push_back(generated[0]);
    while (g < generated.size()) {
        const int64_t budget = std::min<int64_t>(max_drafts, static_cast<int64_t>(generated.size() - g) - 1);
        propose_drafts(context, kDefaultLookupNgram, static_cast<int32_t>(budget), drafts);
        size_t i = 0;
        while (i < drafts.size() && generated[g + i] == drafts[i]) accepted[g + i++] = true;
        const size_t taken = std::min(i + 1, generated.size() - g);  // the accepted drafts and one more
        context.insert(context.end(), generated.begin() + static_cast<int64_t>(g),
                       generated.begin() + static_cast<int64_t>(g + taken));
        g += taken;
    }
    return accepted;
}

}  // namespace

TEST_CASE("a row of a multi-row pass gets the logits of a single-row decode step, bit for bit",
          "[speculative][rows]") {
    const std::vector<const KernelTable*> tables = every_kernel_table();
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        for (const KernelTable* kernels : tables) {
            Engine engine(model.config, std::make_unique<cpu::CpuBackend>(model, *kernels), EngineOptions{});
            INFO(f.name << " on " << kernels->name);
            CHECK(multi_row_pass_equals_decode_steps(engine, f.tokens, static_cast<size_t>(f.n_prefill), 9));
        }
    }
}

TEST_CASE("greedy speculative decoding gives plain greedy's tokens and cache on every fixture",
          "[speculative]") {
    int both = 0, runs = 0;
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        // stories260K: 256 tokens from BOS, its stories repeat names and phrases; the random models: a
        // repetitive prompt, then up to 120 tokens or until the context is full (64 tokens for some).
        const bool stories = f.name == "stories260K";
        const std::vector<int32_t> prompt = stories ? std::vector<int32_t>{1} : repetitive_prompt(f);
        const int32_t max_new = stories ? 256 : tokens_to_generate(model, prompt);
        const Run plain = run_generation(model, best_kernels(), prompt, options_for(max_new, 0), greedy());
        for (int32_t k : {1, 4, 8}) {
            const Run spec = run_generation(model, best_kernels(), prompt, options_for(max_new, k), greedy());
            const SpeculativeStats& s = spec.stats.speculative;
            INFO(f.name << " K " << k << ": drafted " << s.drafted_tokens << ", accepted " << s.accepted_tokens
                        << ", passes " << s.forward_passes << ", generated " << spec.stats.generated_tokens);
            check_same_as_plain(plain, spec);
            CHECK(s.drafted_tokens > 0);
            CHECK(s.forward_passes + s.accepted_tokens == plain.stats.decode_steps);
            CHECK(spec.stats.decode_steps == s.forward_passes);
            // Random models either copy or not: one always repeats a token (every draft accepted), one
            // never follows its prompt (none). Both must happen on two thirds of the runs.
            both += s.accepted_tokens > 0 && s.drafted_tokens > s.accepted_tokens ? 1 : 0;
            ++runs;
        }
    }
    INFO(both << " of " << runs << " runs had drafts accepted and rejected");
    CHECK(both * 3 >= runs * 2);
}

TEST_CASE("greedy speculative decoding is plain greedy on every kernel set", "[speculative]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const std::vector<int32_t> prompt = repetitive_prompt(f);
    const std::vector<const KernelTable*> tables = every_kernel_table();
    for (const KernelTable* kernels : tables) {
        INFO(kernels->name);
        check_same_as_plain(run_generation(model, *kernels, prompt, options_for(100, 0), greedy()),
                            run_generation(model, *kernels, prompt, options_for(100, 6), greedy()));
    }
}

TEST_CASE("sampled speculative decoding gives plain sampling's tokens for the same seed", "[speculative]") {
    // The sampler is called once per produced token, in order, on bitwise equal logits: the draws line up.
    SamplerOptions sampling;
    sampling.temperature = 0.7f;
    sampling.seed = 11;
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        const std::vector<int32_t> prompt = repetitive_prompt(f);
        const int32_t max_new = tokens_to_generate(model, prompt);
        const Run plain = run_generation(model, best_kernels(), prompt, options_for(max_new, 0), sampling);
        const Run spec = run_generation(model, best_kernels(), prompt, options_for(max_new, 5), sampling);
        INFO(f.name << ": accepted " << spec.stats.speculative.accepted_tokens);
        check_same_as_plain(plain, spec);
    }
}

TEST_CASE("a stop token inside an accepted draft ends generation there, nothing after it kept", "[speculative]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const std::vector<int32_t> prompt = retelling_prompt(model);
    const int32_t k = 4;
    const Run unstopped = run_generation(model, best_kernels(), prompt, options_for(96, 0), greedy());
    const std::vector<bool> accepted = accepted_drafts(prompt, unstopped.tokens, k);
    int inside = 0;  // stops that arrive as an accepted draft with more accepted drafts after it in the pass
    std::vector<int32_t> tried;
    for (size_t g = 0; g < unstopped.tokens.size(); ++g) {
        const int32_t stop = unstopped.tokens[g];
        if (std::find(tried.begin(), tried.end(), stop) != tried.end()) continue;  // g is its first occurrence
        tried.push_back(stop);
        const Run plain = run_generation(model, best_kernels(), prompt, options_for(96, 0, {stop}), greedy());
        const Run spec = run_generation(model, best_kernels(), prompt, options_for(96, k, {stop}), greedy());
        INFO("stop token " << stop << " first at " << g);
        CHECK(plain.stats.stopped_by_token);
        CHECK(plain.tokens.size() == g);
        check_same_as_plain(plain, spec);
        if (g + 1 < accepted.size() && accepted[g] && accepted[g + 1]) ++inside;
    }
    CHECK(inside > 0);
}

TEST_CASE("max_new_tokens and the context end speculative decoding exactly, even inside a draft",
          "[speculative]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const std::vector<int32_t> prompt = retelling_prompt(model);
    const int32_t k = 8, longest = 64;
    const Run full = run_generation(model, best_kernels(), prompt, options_for(longest, 0), greedy());
    const std::vector<bool> accepted = accepted_drafts(prompt, full.tokens, k);
    int cut_inside = 0;  // limits falling where the unlimited run accepted a draft run across them
    for (int32_t n = 0; n <= longest; ++n) {
        INFO("max_new_tokens " << n);
        const Run plain = run_generation(model, best_kernels(), prompt, options_for(n, 0), greedy());
        check_same_as_plain(plain, run_generation(model, best_kernels(), prompt, options_for(n, k), greedy()));
        CHECK(plain.tokens.size() == static_cast<size_t>(n));
        // The context as the limit: prompt + n tokens fill it, the last one never appended.
        const int32_t context = static_cast<int32_t>(prompt.size()) + n;
        if (n > 0) {
            const Run by_context = run_generation(model, best_kernels(), prompt, options_for(-1, k), greedy(), context);
            check_same_as_plain(plain, by_context);
        }
        if (n >= 2 && n < longest && accepted[static_cast<size_t>(n - 1)] && accepted[static_cast<size_t>(n)])
            ++cut_inside;
    }
    CHECK(cut_inside > 0);
}

TEST_CASE("the interrupted poll ends speculative decoding where plain decoding ends", "[speculative]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const std::vector<int32_t> prompt = {1};
    for (int polls : {1, 2, 7, 30}) {
        auto after = [](int n) {
            return [n, count = 0]() mutable { return ++count > n; };  // true from the (n + 1)th poll on
        };
        GenerationOptions plain_options = options_for(80, 0), spec_options = options_for(80, 4);
        plain_options.interrupted = after(polls);
        spec_options.interrupted = after(polls);
        const Run plain = run_generation(model, best_kernels(), prompt, plain_options, greedy());
        const Run spec = run_generation(model, best_kernels(), prompt, spec_options, greedy());
        INFO("interrupted after " << polls << " polls");
        CHECK(plain.stats.interrupted);
        CHECK(spec.stats.interrupted);
        check_same_as_plain(plain, spec);
    }
}

TEST_CASE("speculative options out of range are refused before any work", "[speculative]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    Engine engine(model.config, std::make_unique<cpu::CpuBackend>(model, best_kernels()), EngineOptions{});
    Sampler sampler(greedy());
    const NoText no_text;
    const SeqId seq = engine.new_sequence();
    const std::vector<int32_t> prompt = {1, 2, 3};
    auto refused = [&](int32_t drafts, int32_t ngram, const std::string& message) {
        GenerationOptions o = options_for(10, drafts);
        o.lookup_ngram = ngram;
        CHECK_THROWS_WITH(continue_sequence(engine, seq, no_text, sampler, prompt, o, [](std::string_view) {}),
                          Catch::Contains(message));
        CHECK(engine.length(seq) == 0);
    };
    refused(33, 3, "--speculative must be from 1 to 32 draft tokens, not 33");
    refused(-1, 3, "--speculative must be from 1 to 32");
    refused(4, 0, "--lookup-ngram must be from 1 to 8, not 0");
    refused(4, 9, "--lookup-ngram must be from 1 to 8, not 9");
    engine.free_sequence(seq);
    CHECK(engine.cache().pool().num_used() == 0);
}
