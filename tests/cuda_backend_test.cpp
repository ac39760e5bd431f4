// The CUDA backend end to end: whole models against ONNX Runtime's logits with the CPU's tolerances, and
// against the CPU backend for everything the engine does over the cache (greedy tokens, beams, rewinds,
// windows, shared prefixes, batches). Every test exits as skipped where no GPU is present (cuda/kernels/test_main.cpp).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "cuda/backend/cuda_backend.h"
#include "engine/files/npy.h"
#include "engine/generation/beam_search.h"
#include "engine/generation/generator.h"
#include "engine/generation/load_tokenizer.h"
#include "engine/generation/position_logits.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"
#include "fixtures.h"

using namespace kvx;
using namespace kvx::test;

namespace {

struct Backends {
    bool cuda = true;
    KvDtype kv_dtype = KvDtype::f32;
    bool graphs = true;
};

Engine make_engine(const Model& model, const Backends& b, int32_t block_size = 16, int32_t num_blocks = 0,
                   int32_t context = 0) {
    EngineOptions o;
    o.block_size = block_size;
    o.num_blocks = num_blocks;
    o.context = context;
    o.kv_dtype = b.kv_dtype;
    std::unique_ptr<Backend> backend;
    if (b.cuda) {
        cuda::CudaBackendOptions options;
        options.cuda_graphs = b.graphs;
        backend = std::make_unique<cuda::CudaBackend>(model, options);
    } else {
        backend = std::make_unique<cpu::CpuBackend>(model, cpu::cpu_kernels(cpu::best_simd_level()));
    }
    return Engine(model.config, std::move(backend), o);
}

double worst_position_error(const std::vector<float>& logits, const std::vector<float>& ref, int32_t vocab) {
    return worst_row_error(logits, ref, static_cast<size_t>(vocab), 0, logits.size() / static_cast<size_t>(vocab));
}

// Greedy continuation of `prompt` for n tokens, one decode step each.
std::vector<int32_t> greedy(Engine& engine, std::span<const int32_t> prompt, size_t n) {
    const SeqId seq = engine.new_sequence();
    std::vector<int32_t> out;
    const std::vector<float>* logits = &engine.forward({{seq, prompt, false}});
    while (out.size() < n) {
        out.push_back(argmax(logits->data(), engine.vocab_size()));
        if (out.size() == n || engine.length(seq) >= engine.context()) break;
        logits = &engine.forward({{seq, std::span<const int32_t>(&out.back(), 1), false}});
    }
    engine.free_sequence(seq);
    return out;
}

// Under the CPU emulation with the sanitizers (CI's second pass) every step costs about a thousand times what
// it costs on a GPU, and these tests were 400 of that pass's 1000 CPU-seconds. There, each model runs with
// CUDA graphs only (that graphs change no bit, "CUDA graphs replay decode steps with the bits of direct
// launches" checks there too), greedy decoding compares 16 tokens rather than 48, sampling 24 rather than 64,
// and the fixtures of large vocabularies are left out: the emulation runs a warp's lanes as fibers switched at
// every shuffle, so a 32,000-row classifier (ortgenai_llama_fp16, 2 layers of width 16) cost 22 s a test,
// more than the nine other fixtures together, for kernels the others run too (fp16 weights, one KV head).
// The fp16 KV cache and the greedy tokens, which the logits test already holds to ONNX Runtime on every
// fixture, run there on the fixtures that differ in what they exercise: head sizes 8 to 80, grouped
// queries, a window, fp16 weights, GPT-2's layers.
#if KVX_CUDA_EMULATED
constexpr bool kGraphsSettings[] = {true};
constexpr size_t kGreedyTokens = 16;
constexpr int kSampledTokens = 24;
constexpr int32_t kMaxVocab = 4096;
const std::vector<std::string> kFp16KvFixtures = {"stories260K", "rand_hd80_gqa1_l1_v257_ext",
                                                  "rand_window7_l3_hd12_v211", "rand_hd24_gqa4_l3_v301_untied"};
const std::vector<std::string> kGreedyFixtures = {"stories260K", "rand_gpt2_hd8_l6_v1001_untied_ext",
                                                  "rand_hd24_gqa4_l3_v301_untied_f16"};
#else
constexpr bool kGraphsSettings[] = {true, false};
constexpr size_t kGreedyTokens = 48;
constexpr int kSampledTokens = 64;
constexpr int32_t kMaxVocab = std::numeric_limits<int32_t>::max();
const std::vector<std::string> kFp16KvFixtures, kGreedyFixtures;  // empty: every fixture
#endif

// The fixtures with at most kMaxVocab tokens, only those named in `names` unless it is empty.
std::vector<Fixture> model_fixtures(const std::vector<std::string>& names = {}) {
    std::vector<Fixture> fixtures = load_fixtures();
    std::erase_if(fixtures, [&](const Fixture& f) {
        return f.vocab > kMaxVocab || (!names.empty() && std::find(names.begin(), names.end(), f.name) == names.end());
    });
    if (!names.empty()) REQUIRE(fixtures.size() == names.size());
    return fixtures;
}

}  // namespace

TEST_CASE("CUDA logits match ONNX Runtime at every position, prefill then decode", "[cuda][model][ort]") {
    for (const Fixture& f : model_fixtures()) {
        const Model model = load_model(f.model_dir);
        for (const bool graphs : kGraphsSettings) {
            Engine engine = make_engine(model, Backends{true, KvDtype::f32, graphs});
            const auto logits = position_logits(engine, f.tokens, static_cast<size_t>(f.n_prefill));
            const double worst = worst_position_error(logits, f.ref_logits, f.vocab);
            INFO(f.name << (graphs ? " with" : " without") << " CUDA graphs: worst max|cuda - ort| / max|ort| = " << worst
                        << " (tolerance " << f.tolerance << ")");
            CHECK(worst <= f.tolerance);
            CHECK(engine.cache_usage().blocks_in_use == 0);
        }
    }
}

TEST_CASE("CUDA with an fp16 KV cache matches ONNX Runtime within 2e-3", "[cuda][model][ort][kv_f16]") {
    for (const Fixture& f : model_fixtures(kFp16KvFixtures)) {
        const Model model = load_model(f.model_dir);
        Engine engine = make_engine(model, Backends{true, KvDtype::f16, true});
        const auto logits = position_logits(engine, f.tokens, static_cast<size_t>(f.n_prefill));
        const double worst = worst_position_error(logits, f.ref_logits, f.vocab);
        INFO(f.name << ", fp16 KV: worst " << worst);
        CHECK(worst <= std::max(2e-3, f.tolerance));
    }
}

TEST_CASE("CUDA greedy tokens are the CPU backend's", "[cuda][model]") {
    for (const Fixture& f : model_fixtures(kGreedyFixtures)) {
        const Model model = load_model(f.model_dir);
        const auto prompt = std::span<const int32_t>(f.tokens).first(static_cast<size_t>(f.n_prefill));
        const size_t n = std::min<size_t>(kGreedyTokens, static_cast<size_t>(model.config.max_seq_len) - prompt.size());
        Engine cpu = make_engine(model, Backends{false});
        Engine gpu = make_engine(model, Backends{true});
        INFO(f.name);
        CHECK(greedy(gpu, prompt, n) == greedy(cpu, prompt, n));
    }
}

// The token is picked on the device (argmax, or top-k/top-p with the host's draw): only it crosses, and a
// seed gives the CPU backend's tokens.
TEST_CASE("CUDA generation picks the CPU backend's tokens on the device, greedy and seeded", "[cuda][sampling]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const auto tokenizer = load_tokenizer(f.model_dir, model.config);
    const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.begin() + 8);
    for (const SamplerOptions& sampling : {SamplerOptions{0.0f, 40, 0.95f, 1}, SamplerOptions{0.8f, 40, 0.95f, 7},
                                           SamplerOptions{1.0f, 1024, 1.0f, 3}, SamplerOptions{1.5f, 5, 0.5f, 11}}) {
        GenerationOptions options;
        options.max_new_tokens = kSampledTokens;
        std::vector<int32_t> got, want;
        for (const bool cuda : {true, false}) {
            Engine engine = make_engine(model, Backends{cuda});
            CHECK(engine.backend().can_sample(sampling) == cuda);
            Sampler sampler(sampling);
            const SeqId seq = engine.new_sequence();
            continue_sequence(engine, seq, *tokenizer, sampler, prompt, options, [](std::string_view) {},
                              cuda ? &got : &want);
        }
        INFO("temperature " << sampling.temperature << ", top-k " << sampling.top_k << ", top-p " << sampling.top_p);
        CHECK(got == want);
    }
}

TEST_CASE("CUDA graphs replay decode steps with the bits of direct launches", "[cuda][graphs]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    Engine with = make_engine(model, Backends{true, KvDtype::f32, true});
    Engine without = make_engine(model, Backends{true, KvDtype::f32, false});
    CHECK(position_logits(with, f.tokens, 4) == position_logits(without, f.tokens, 4));
    const auto& backend = dynamic_cast<const cuda::CudaBackend&>(with.backend());
    CHECK(backend.graph_captures() >= 1);
    CHECK(backend.graph_replays() >= static_cast<int64_t>(f.tokens.size()) - 8);
}

TEST_CASE("CUDA beam search gives the CPU backend's hypotheses", "[cuda][beam]") {
    for (const std::string name : {"stories260K", "rand_gpt2_hd8_l6_v1001_untied_ext", "rand_hd24_gqa4_l3_v301_untied"}) {
        const Fixture f = load_fixture(name);
        const Model model = load_model(f.model_dir);
        BeamSearchOptions options;
        options.num_beams = 4;
        options.max_new_tokens = 12;
        const auto prompt = std::span<const int32_t>(f.tokens).first(static_cast<size_t>(f.n_prefill));
        Engine cpu = make_engine(model, Backends{false}, 4, 400);
        Engine gpu = make_engine(model, Backends{true}, 4, 400);
        const auto want = beam_search(cpu, prompt, options).hypotheses;
        const auto got = beam_search(gpu, prompt, options).hypotheses;
        INFO(name);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            CHECK(got[i].tokens == want[i].tokens);
            CHECK(got[i].score == Approx(want[i].score).epsilon(1e-4));
        }
        CHECK(gpu.cache_usage().blocks_in_use == cpu.cache_usage().blocks_in_use);
    }
}

TEST_CASE("CUDA after a rewind gives ONNX Runtime's logits for the tokens fed again", "[cuda][rewind][ort]") {
    const Fixture f = load_fixture("rand_hd24_gqa4_l3_v301_untied");
    const Model model = load_model(f.model_dir);
    const size_t vocab = static_cast<size_t>(f.vocab);
    const std::span<const int32_t> tokens(f.tokens);
    for (const int32_t bs : {1, 4, 16}) {
        Engine engine = make_engine(model, Backends{true}, bs);
        const SeqId seq = engine.new_sequence();
        engine.forward({{seq, tokens, false}});
        for (const int32_t back : {int32_t(tokens.size()) - 1, 5, 1}) {
            engine.rewind(seq, back);
            const auto& logits = engine.forward({{seq, tokens.subspan(static_cast<size_t>(back)), true}});
            INFO("block size " << bs << ", rewound to " << back);
            for (size_t p = static_cast<size_t>(back); p < tokens.size(); ++p)
                CHECK(relative_max_error(&logits[(p - static_cast<size_t>(back)) * vocab], &f.ref_logits[p * vocab], vocab) <=
                      f.tolerance);
        }
        engine.free_sequence(seq);
        CHECK(engine.cache_usage().blocks_in_use == 0);
    }
}

TEST_CASE("CUDA windowed layers match ONNX Runtime for every chunk schedule", "[cuda][window][ort]") {
    const Fixture f = load_fixture("rand_window7_l3_hd12_v211");
    const Model model = load_model(f.model_dir);
    REQUIRE_FALSE(f.chunk_schedules.empty());
    for (const int32_t bs : {1, 4, 16})
        for (const ChunkSchedule& schedule : f.chunk_schedules) {
            Engine engine = make_engine(model, Backends{true}, bs);
            const auto logits = run_chunks(engine, f.tokens, schedule.chunks);
            INFO(schedule.name << ", block size " << bs);
            CHECK(worst_position_error(logits, schedule.ref_logits, f.vocab) <= f.tolerance);
        }
}

TEST_CASE("CUDA prompts that share a cached prefix get ONNX Runtime's logits", "[cuda][prefix][ort]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const size_t vocab = static_cast<size_t>(f.vocab);
    Engine engine = make_engine(model, Backends{true}, 4, 64);
    const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.begin() + 18);
    const SeqId first = engine.new_sequence();
    engine.forward({{first, prompt, false}});
    engine.free_sequence(first);
    const SequenceStart second = engine.start_sequence(prompt);
    CHECK(second.cached_tokens == 16);  // four whole blocks of 4; the last token is always computed
    const auto& logits =
        engine.forward({{second.seq, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(second.cached_tokens)), true}});
    for (size_t p = static_cast<size_t>(second.cached_tokens); p < prompt.size(); ++p)
        CHECK(relative_max_error(&logits[(p - static_cast<size_t>(second.cached_tokens)) * vocab], &f.ref_logits[p * vocab],
                                 vocab) <= f.tolerance);
    // A fork writes into its own copy of the shared partial block (positions 16, 17): copy-on-write on the device.
    const SeqId fork = engine.fork_sequence(second.seq);
    const auto fork_logits = engine.forward({{fork, std::span<const int32_t>(f.tokens).subspan(18, 3), true}});
    CHECK_FALSE(engine.last_copies().front().empty());
    for (size_t p = 18; p < 21; ++p)
        CHECK(relative_max_error(&fork_logits[(p - 18) * vocab], &f.ref_logits[p * vocab], vocab) <= f.tolerance);
    engine.cache().check_invariants();
}

TEST_CASE("CUDA sequences batched in one pass get the CPU backend's logits", "[cuda][batch]") {
    const Fixture f = load_fixture(GENERATE(as<std::string>(), "stories260K", "rand_gpt2_hd8_l6_v1001_untied_ext",
                                            "rand_hd8_gqa8_l12_v1001_untied"));
    const Model model = load_model(f.model_dir);
    const size_t vocab = static_cast<size_t>(f.vocab);
    const std::span<const int32_t> tokens(f.tokens);
    constexpr int kSeqs = 5;
    Engine cpu = make_engine(model, Backends{false}, 4, 256);
    Engine gpu = make_engine(model, Backends{true}, 4, 256);
    std::vector<SeqId> cpu_seqs, gpu_seqs;
    std::vector<SequenceInput> cpu_in, gpu_in;
    for (int i = 0; i < kSeqs; ++i) {
        cpu_seqs.push_back(cpu.new_sequence());
        gpu_seqs.push_back(gpu.new_sequence());
        const auto prompt = tokens.subspan(static_cast<size_t>(i), 1 + 5 * static_cast<size_t>(i));
        cpu_in.push_back({cpu_seqs.back(), prompt, true});
        gpu_in.push_back({gpu_seqs.back(), prompt, true});
    }
    const std::vector<float> want = cpu.forward(cpu_in);
    const std::vector<float> got = gpu.forward(gpu_in);
    CHECK(worst_row_error(got, want, vocab, 0, want.size() / vocab) <= 1e-4);
    // Then decode steps of all five together, mixed with a prefill chunk of a sixth sequence.
    const SeqId cpu_extra = cpu.new_sequence(), gpu_extra = gpu.new_sequence();
    for (size_t step = 0; step < 6; ++step) {
        cpu_in.clear();
        gpu_in.clear();
        for (int i = 0; i < kSeqs; ++i) {
            const auto token = tokens.subspan((step + static_cast<size_t>(i) * 3) % tokens.size(), 1);
            cpu_in.push_back({cpu_seqs[static_cast<size_t>(i)], token, false});
            gpu_in.push_back({gpu_seqs[static_cast<size_t>(i)], token, false});
        }
        const auto chunk = tokens.subspan(step * 3, 3);
        cpu_in.push_back({cpu_extra, chunk, true});
        gpu_in.push_back({gpu_extra, chunk, true});
        const std::vector<float> want_step = cpu.forward(cpu_in);
        const std::vector<float> got_step = gpu.forward(gpu_in);
        INFO("step " << step);
        CHECK(worst_row_error(got_step, want_step, vocab, 0, want_step.size() / vocab) <= 1e-4);
    }
    gpu.cache().check_invariants();
}

TEST_CASE("SmolLM2-135M on CUDA matches ONNX Runtime's logits and greedy tokens", "[cuda][smollm2][ort]") {
    const char* env = std::getenv("KVX_SMOLLM2_DIR");
    const std::string dir = env && *env ? env : KVX_SMOLLM2_DIR;
    if (!std::filesystem::exists(std::filesystem::path(dir).parent_path() / "meta.json")) {
        WARN("no SmolLM2 fixture at " << dir << " (ctest's full run makes it): this case checks nothing");
        return;
    }
    const std::string fixture = std::filesystem::path(dir).parent_path().string();
    const Fixture f = load_fixture_at(fixture, "smollm2");
    const Model model = load_model(f.model_dir);
    Engine engine = make_engine(model, Backends{true}, 16, 0, 512);
    const auto logits = position_logits(engine, f.tokens, static_cast<size_t>(f.n_prefill));
    CHECK(worst_position_error(logits, f.ref_logits, f.vocab) <= 1e-4);

    std::vector<int32_t> prompt, expected;
    for (int64_t t : read_npy(fixture + "/prompt_tokens.npy").i64) prompt.push_back(static_cast<int32_t>(t));
    for (int64_t t : read_npy(fixture + "/greedy_tokens.npy").i64) expected.push_back(static_cast<int32_t>(t));
    const auto generated = greedy(engine, prompt, expected.size() - prompt.size());
    CHECK(std::vector<int32_t>(expected.begin() + static_cast<std::ptrdiff_t>(prompt.size()), expected.end()) == generated);
}
