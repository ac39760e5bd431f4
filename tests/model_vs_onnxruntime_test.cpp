// Whole models against ONNX Runtime running the same ONNX file, and kvx against itself: cached decode
// against full recompute, every block size against block size 16, batched against alone.
#include <catch2/catch.hpp>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/runtime/engine.h"
#include "fixtures.h"

using namespace kvx;
using namespace kvx::test;

TEST_CASE("logits match ONNX Runtime at every position, prefill then decode", "[model][ort]") {
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        REQUIRE(model.config.vocab_size == f.vocab);
        for (const KernelTable* kernels : every_kernel_table()) {
            const std::vector<float> logits = run_prefill_then_decode(model, *kernels, f.tokens, f.n_prefill);
            double worst = 0;
            for (size_t pos = 0; pos < f.tokens.size(); ++pos) {
                const size_t at = pos * static_cast<size_t>(f.vocab);
                worst = std::max(worst, relative_max_error(&logits[at], &f.ref_logits[at], static_cast<size_t>(f.vocab)));
            }
            INFO(f.name << " with " << kernels->name << ": worst max|kvx - ort| / max|ort| = " << worst
                        << " (tolerance " << f.tolerance << ")");
            CHECK(worst <= f.tolerance);
        }
    }
}

TEST_CASE("cached decode equals a full recompute at every step", "[model][cache]") {
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    for (const Fixture& f : load_fixtures()) {
        const Model model = load_model(f.model_dir);
        const auto cached = run_prefill_then_decode(model, kernels, f.tokens, f.n_prefill);
        Engine engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), EngineOptions{});
        double worst = 0;
        for (size_t end = static_cast<size_t>(f.n_prefill); end < f.tokens.size(); ++end) {
            const SeqId fresh = engine.new_sequence();
            const auto& recomputed = engine.forward({{fresh, std::span<const int32_t>(f.tokens).first(end + 1), false}});
            const size_t at = end * static_cast<size_t>(f.vocab);
            worst = std::max(worst, relative_max_error(&cached[at], recomputed.data(), static_cast<size_t>(f.vocab)));
            engine.free_sequence(fresh);
        }
        INFO(f.name << ": worst relative difference " << worst);
        CHECK(worst <= 1e-5);
    }
}

TEST_CASE("every block size gives the logits of block size 16", "[model][cache]") {
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    for (const std::string name : {"stories260K", "rand_hd80_gqa1_l1_v257_ext", "rand_hd24_gqa4_l3_v301_untied",
                                   "rand_gpt2_hd24_l3_v263_ctx65", "ortgenai_gpt2_l5_v1000"}) {
        const Fixture f = load_fixture(name);
        const Model model = load_model(f.model_dir);
        const auto base = run_prefill_then_decode(model, kernels, f.tokens, f.n_prefill, 16);
        for (int32_t bs = 1; bs <= 256; bs *= 2) {
            const auto other = run_prefill_then_decode(model, kernels, f.tokens, f.n_prefill, bs);
            double worst = 0;
            for (size_t pos = 0; pos < f.tokens.size(); ++pos) {
                const size_t at = pos * static_cast<size_t>(f.vocab);
                worst = std::max(worst, relative_max_error(&other[at], &base[at], static_cast<size_t>(f.vocab)));
            }
            INFO(name << " block size " << bs << ": worst relative difference " << worst);
            CHECK(worst <= 1e-6);
        }
    }
}

TEST_CASE("sequences batched in one pass get the logits they get alone", "[model][batch]") {
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    const std::string name = GENERATE(as<std::string>(), "stories260K", "rand_gpt2_hd8_l6_v1001_untied_ext");
    INFO(name);
    const Fixture f = load_fixture(name);
    const Model model = load_model(f.model_dir);
    const auto alone = run_prefill_then_decode(model, kernels, f.tokens, f.n_prefill, 4);
    const size_t vocab = static_cast<size_t>(f.vocab);
    const std::span<const int32_t> tokens(f.tokens);

    EngineOptions options;
    options.block_size = 4;
    options.num_blocks = 64;
    Engine engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), options);
    // Sequence a is a whole prefill ahead of b: each step decodes a and prefills a chunk of b together.
    const SeqId a = engine.new_sequence(), b = engine.new_sequence();
    const size_t n_prefill = static_cast<size_t>(f.n_prefill);
    engine.forward({{a, tokens.first(n_prefill), false}});
    for (size_t i = n_prefill; i < tokens.size(); ++i) {
        const size_t b_from = engine.length(b), b_to = std::min(tokens.size(), b_from + 3);
        std::vector<SequenceInput> step = {{a, tokens.subspan(i, 1), false}};
        if (b_from < b_to) step.push_back({b, tokens.subspan(b_from, b_to - b_from), true});
        const auto& logits = engine.forward(step);
        CHECK(relative_max_error(&logits[0], &alone[i * vocab], vocab) <= 1e-5);
        for (size_t j = b_from; j < b_to; ++j)
            CHECK(relative_max_error(&logits[(1 + j - b_from) * vocab], &alone[j * vocab], vocab) <= 1e-5);
        engine.cache().check_invariants();
    }
}

// fp16 storage rounds each K and V value once (relative error 2^-11); attention still computes in fp32.
// Measured worst: 1.1e-3 (stories260K), 7.5e-4 for ONNX Runtime GenAI's fp16 Llama, whose graph keeps an
// fp16 cache itself.
TEST_CASE("an fp16 KV cache gives ONNX Runtime's logits within 2e-3", "[model][ort][kv_f16]") {
    const Fixture f = load_fixture(GENERATE(as<std::string>(), "stories260K", "rand_hd80_gqa1_l1_v257_ext",
                                            "rand_hd24_gqa4_l3_v301_untied", "rand_gpt2_hd24_l3_v263_ctx65",
                                            "ortgenai_gpt2_l5_v1000", "ortgenai_llama_fp16", "rand_window7_l3_hd12_v211"));
    const Model model = load_model(f.model_dir);
    for (const KernelTable* kernels : every_kernel_table()) {
        const auto logits = run_prefill_then_decode(model, *kernels, f.tokens, f.n_prefill, 16, KvDtype::f16);
        double worst = 0;
        for (size_t pos = 0; pos < f.tokens.size(); ++pos) {
            const size_t at = pos * static_cast<size_t>(f.vocab);
            worst = std::max(worst, relative_max_error(&logits[at], &f.ref_logits[at], static_cast<size_t>(f.vocab)));
        }
        INFO(f.name << " with " << kernels->name << ", fp16 KV: worst max|kvx - ort| / max|ort| = " << worst);
        CHECK(worst <= 2e-3);
    }
    // The cache really holds halves: half the bytes, and logits that differ from the fp32 cache's.
    const auto fp32 = run_prefill_then_decode(model, reference_kernels(), f.tokens, f.n_prefill);
    const auto fp16 = run_prefill_then_decode(model, reference_kernels(), f.tokens, f.n_prefill, 16, KvDtype::f16);
    CHECK(fp16 != fp32);
    auto block_bytes = [&](KvDtype dtype) {
        EngineOptions options;
        options.kv_dtype = dtype;
        return Engine(model.config, std::make_unique<cpu::CpuBackend>(model, reference_kernels()), options)
            .kv_bytes_per_block();
    };
    CHECK(block_bytes(KvDtype::f16) * 2 == block_bytes(KvDtype::f32));
}

// Five sequences of different lengths prefill together in one pass, then decode together, one token each per
// step, each through its own block table and positions. Every row must equal the same sequence run alone:
// "nonsense output with more than one slot" was a bug elsewhere.
TEST_CASE("several prompts prefill in one pass and decode together as they would alone", "[model][batch]") {
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    const std::string name = GENERATE(as<std::string>(), "stories260K", "rand_hd24_gqa4_l3_v301_untied",
                                      "ortgenai_gpt2_l5_v1000");
    INFO(name);
    const Fixture f = load_fixture(name);
    const Model model = load_model(f.model_dir);
    const size_t vocab = static_cast<size_t>(f.vocab);
    constexpr int kSeqs = 5, kDecode = 12;

    // Sequence i: a rotation of the fixture's tokens, prompt of 1 + 7 * i tokens (1, 8, 15, 22, 29).
    std::vector<std::vector<int32_t>> tokens(kSeqs);
    std::vector<size_t> n_prompt(kSeqs);
    std::vector<std::vector<float>> alone(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
        n_prompt[i] = 1 + 7 * static_cast<size_t>(i);
        for (size_t t = 0; t < n_prompt[i] + kDecode; ++t)
            tokens[i].push_back(f.tokens[(t + 5 * static_cast<size_t>(i)) % f.tokens.size()]);
        alone[i] = run_prefill_then_decode(model, kernels, tokens[i], static_cast<int32_t>(n_prompt[i]), 4);
    }

    EngineOptions options;
    options.block_size = 4;
    options.num_blocks = 64;
    Engine engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), options);
    std::vector<SeqId> seqs;
    std::vector<SequenceInput> prefill;
    for (int i = 0; i < kSeqs; ++i) {
        seqs.push_back(engine.new_sequence());
        prefill.push_back({seqs.back(), std::span<const int32_t>(tokens[i]).first(n_prompt[i]), true});
    }
    const auto& prefilled = engine.forward(prefill);
    size_t row = 0;
    for (int i = 0; i < kSeqs; ++i)
        for (size_t t = 0; t < n_prompt[i]; ++t, ++row)
            CHECK(relative_max_error(&prefilled[row * vocab], &alone[i][t * vocab], vocab) <= 1e-5);

    for (size_t step = 0; step < kDecode; ++step) {
        std::vector<SequenceInput> decode;
        for (int i = 0; i < kSeqs; ++i)
            decode.push_back({seqs[i], std::span<const int32_t>(tokens[i]).subspan(n_prompt[i] + step, 1), false});
        const auto& logits = engine.forward(decode);
        for (int i = 0; i < kSeqs; ++i) {
            INFO("sequence " << i << ", decode step " << step);
            CHECK(relative_max_error(&logits[static_cast<size_t>(i) * vocab],
                                     &alone[i][(n_prompt[i] + step) * vocab], vocab) <= 1e-5);
        }
    }
    engine.cache().check_invariants();
    for (SeqId s : seqs) engine.free_sequence(s);
    CHECK(engine.cache().pool().num_used() == 0);
}
