#include "fixtures.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/files/npy.h"
#include "engine/generation/position_logits.h"

namespace kvx::test {

namespace fs = std::filesystem;

static std::string fixtures_root() {
    const char* root = std::getenv("KVX_FIXTURES");
    if (!root || !*root) FAIL("KVX_FIXTURES is not set: run the tests through ctest, which makes the fixtures first");
    if (!fs::is_directory(root)) FAIL(std::string("KVX_FIXTURES=") + root + " is not a directory");
    return root;
}

Fixture load_fixture(const std::string& name) { return load_fixture_at(fixtures_root() + "/" + name, name); }

Fixture load_fixture_at(const std::string& dir, const std::string& name) {
    Fixture f;
    f.name = name;
    f.model_dir = dir + "/model";
    std::ifstream meta_file(dir + "/meta.json");
    if (!meta_file) FAIL("fixture " << name << " has no meta.json");
    const auto meta = nlohmann::json::parse(meta_file);
    f.n_prefill = meta.at("n_prefill").get<int32_t>();
    // make_fixtures.py writes each fixture's tolerance; a fixture from elsewhere without one (make_smollm2.py's)
    // is an fp32 one, held to what fp32 against fp32 gives.
    f.tolerance = meta.value("tolerance", 1e-4);
    const NpyArray tokens = read_npy(dir + "/tokens.npy");
    for (int64_t t : tokens.i64) f.tokens.push_back(static_cast<int32_t>(t));
    NpyArray logits = read_npy(dir + "/ref_logits.npy");
    REQUIRE(logits.shape.size() == 2);
    REQUIRE(logits.shape[0] == static_cast<int64_t>(f.tokens.size()));
    f.vocab = static_cast<int32_t>(logits.shape[1]);
    f.ref_logits = std::move(logits.f32);
    if (meta.contains("chunk_schedules"))
        for (const auto& [schedule, chunks] : meta["chunk_schedules"].items()) {
            NpyArray ref = read_npy(dir + "/chunks/" + schedule + ".npy");
            REQUIRE(ref.shape == logits.shape);
            f.chunk_schedules.push_back({schedule, chunks.get<std::vector<int32_t>>(), std::move(ref.f32)});
        }
    return f;
}

std::vector<Fixture> load_fixtures() {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(fixtures_root()))
        if (fs::exists(entry.path() / "meta.json")) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    if (names.empty()) FAIL("no fixtures under KVX_FIXTURES");
    std::vector<Fixture> fixtures;
    for (const auto& name : names) fixtures.push_back(load_fixture(name));
    return fixtures;
}

std::vector<float> run_prefill_then_decode(const Model& model, const KernelTable& kernels,
                                           const std::vector<int32_t>& tokens, int32_t n_prefill,
                                           int32_t block_size, KvDtype kv_dtype) {
    EngineOptions options;
    options.block_size = block_size;
    options.kv_dtype = kv_dtype;
    Engine engine(model.config, std::make_unique<cpu::CpuBackend>(model, kernels), options);
    std::vector<float> all = position_logits(engine, tokens, static_cast<size_t>(n_prefill));
    engine.cache_groups().check_invariants();
    for (size_t g = 0; g < engine.cache_groups().num_groups(); ++g)
        REQUIRE(engine.cache_groups().group(g).pool().num_used() == 0);
    return all;
}

std::vector<float> run_chunks(Engine& engine, const std::vector<int32_t>& tokens, const std::vector<int32_t>& chunks,
                              const std::function<void(SeqId, int32_t)>& after_pass) {
    const size_t vocab = static_cast<size_t>(engine.vocab_size());
    std::vector<float> all(tokens.size() * vocab);  // [tokens][vocab]
    const SeqId seq = engine.new_sequence();
    size_t start = 0;
    for (int32_t n : chunks) {
        REQUIRE(start + static_cast<size_t>(n) <= tokens.size());
        const auto& logits = engine.forward({{seq, std::span<const int32_t>(tokens).subspan(start, static_cast<size_t>(n)), true}});
        std::copy(logits.begin(), logits.end(), all.begin() + static_cast<std::ptrdiff_t>(start * vocab));
        start += static_cast<size_t>(n);
        if (after_pass) after_pass(seq, static_cast<int32_t>(start));
    }
    REQUIRE(start == tokens.size());
    engine.free_sequence(seq);
    return all;
}

double worst_row_error(const std::vector<float>& logits, const std::vector<float>& ref, size_t vocab, size_t from,
                       size_t to) {
    double worst = 0;
    for (size_t row = from; row < to; ++row)
        worst = std::max(worst, relative_max_error(&logits[row * vocab], &ref[row * vocab], vocab));
    return worst;
}

bool multi_row_pass_equals_decode_steps(Engine& engine, std::span<const int32_t> tokens, size_t first, size_t rows) {
    REQUIRE(tokens.size() >= first + rows);
    const SeqId seq = engine.new_sequence();
    engine.forward({{seq, tokens.first(first), false}});
    std::vector<float> single;  // [rows][vocab]
    for (size_t r = 0; r < rows; ++r) {
        const std::vector<float>& row = engine.forward({{seq, tokens.subspan(first + r, 1), false}});
        single.insert(single.end(), row.begin(), row.end());
    }
    engine.rewind(seq, static_cast<int32_t>(first));
    const std::vector<float>& multi = engine.forward({{seq, tokens.subspan(first, rows), true}});  // [rows][vocab]
    const bool same = multi.size() == single.size() &&
                      std::memcmp(multi.data(), single.data(), single.size() * sizeof(float)) == 0;
    engine.free_sequence(seq);
    return same;
}

std::vector<const KernelTable*> every_kernel_table() {
    std::vector<const KernelTable*> tables = {&reference_kernels()};
    for (cpu::SimdLevel level : cpu::supported_simd_levels()) tables.push_back(&cpu::cpu_kernels(level));
    return tables;
}

double relative_max_error(const float* a, const float* b, size_t n) {
    double max_diff = 0, max_ref = 1e-30;
    for (size_t i = 0; i < n; ++i) {
        max_diff = std::max(max_diff, std::fabs(double{a[i]} - double{b[i]}));
        max_ref = std::max(max_ref, std::fabs(double{b[i]}));
    }
    return max_diff / max_ref;
}

}  // namespace kvx::test
