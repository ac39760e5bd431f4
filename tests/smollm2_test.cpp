// SmolLM2-135M-Instruct, a real model (30 layers, 9 query and 3 KV heads of 64, vocabulary 49152), against
// ONNX Runtime running the ONNX file it was converted from: the logits of every position of a 64-token
// prefill and 64 decode steps, and ONNX Runtime's greedy continuation of a chat prompt, token for token.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/files/npy.h"
#include "engine/generation/position_logits.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"
#include "fixtures.h"

using namespace kvx;
using namespace kvx::test;

namespace {

// The converted model, $KVX_SMOLLM2_DIR; the fixture's other files sit in its parent (tests/smollm2_main.cpp).
std::string smollm2_dir() {
    const char* dir = std::getenv("KVX_SMOLLM2_DIR");
    if (!dir || !*dir) FAIL("KVX_SMOLLM2_DIR is not set: run the tests through ctest, which makes the SmolLM2 fixture first");
    if (!std::filesystem::is_directory(dir)) FAIL(std::string("KVX_SMOLLM2_DIR=") + dir + " is not a directory");
    return dir;
}

std::string fixture_dir() { return std::filesystem::path(smollm2_dir()).parent_path().string(); }

std::vector<int32_t> read_tokens(const std::string& path) {
    std::vector<int32_t> tokens;
    for (int64_t t : read_npy(path).i64) tokens.push_back(static_cast<int32_t>(t));
    return tokens;
}

// An engine whose cache holds `context` tokens, not the model's 8192: the tests need a few hundred.
Engine small_engine(const Model& model, const KernelTable& kernels, int32_t context) {
    EngineOptions options;
    options.context = context;
    return Engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), options);
}

}  // namespace

TEST_CASE("SmolLM2-135M logits match ONNX Runtime at every position, prefill then decode", "[smollm2][ort]") {
    const Fixture f = load_fixture_at(fixture_dir(), "smollm2");
    const Model model = load_model(f.model_dir);
    REQUIRE(model.config.vocab_size == f.vocab);
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    Engine engine = small_engine(model, kernels, static_cast<int32_t>(f.tokens.size()));
    const std::vector<float> logits = position_logits(engine, f.tokens, static_cast<size_t>(f.n_prefill));

    double worst = 0;
    size_t worst_pos = 0;
    for (size_t pos = 0; pos < f.tokens.size(); ++pos) {
        const size_t at = pos * static_cast<size_t>(f.vocab);
        const double error = relative_max_error(&logits[at], &f.ref_logits[at], static_cast<size_t>(f.vocab));
        if (error > worst) worst = error, worst_pos = pos;
    }
    INFO("SmolLM2 with " << kernels.name << ": worst max|kvx - ort| / max|ort| = " << worst << " at position "
                         << worst_pos);
    CHECK(worst <= 1e-4);
}

TEST_CASE("SmolLM2-135M greedy decoding gives ONNX Runtime's 128 tokens", "[smollm2][ort]") {
    const std::vector<int32_t> prompt = read_tokens(fixture_dir() + "/prompt_tokens.npy");
    const std::vector<int32_t> expected = read_tokens(fixture_dir() + "/greedy_tokens.npy");
    REQUIRE(expected.size() > prompt.size());
    const Model model = load_model(smollm2_dir());
    const KernelTable& kernels = cpu::cpu_kernels(cpu::best_simd_level());
    Engine engine = small_engine(model, kernels, static_cast<int32_t>(expected.size()));

    // Greedy past any end-of-turn token, as the reference does: the comparison is of the arithmetic.
    std::vector<int32_t> tokens = prompt;
    const SeqId seq = engine.new_sequence();
    const std::vector<float>* logits = &engine.forward({{seq, tokens, false}});
    while (true) {
        tokens.push_back(argmax(logits->data(), model.config.vocab_size));
        if (tokens.size() == expected.size()) break;
        logits = &engine.forward({{seq, std::span<const int32_t>(tokens).last(1), false}});
    }
    engine.free_sequence(seq);

    size_t first_difference = 0;
    while (first_difference < tokens.size() && tokens[first_difference] == expected[first_difference]) ++first_difference;
    INFO("the first " << first_difference << " of " << expected.size() << " tokens agree (prompt "
                      << prompt.size() << ")");
    CHECK(tokens == expected);
}

// Speculative decoding verifies drafts in one multi-row pass and relies on each row getting the bits a
// single-row decode step gets. SmolLM2's matrices are 576 and 1536 wide, past matmul's 512-wide depth
// blocks, where the decode GEMV and the prefill GEMM once summed differently (the random fixtures are
// narrower).
TEST_CASE("SmolLM2-135M: a row of a multi-row pass gets a single-row decode step's logits, bit for bit",
          "[smollm2][speculative]") {
    const std::vector<int32_t> tokens = read_tokens(fixture_dir() + "/greedy_tokens.npy");
    const Model model = load_model(smollm2_dir());
    // The best level only, as the tests above: cpu_kernels_test's [rows] checks matmul on every level.
    Engine engine = small_engine(model, cpu::cpu_kernels(cpu::best_simd_level()), 64);
    CHECK(multi_row_pass_equals_decode_steps(engine, tokens, 16, 5));
}
