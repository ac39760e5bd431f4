// Bad requests to the engine and bad model files: a clear kvx::Error that names the problem, and nothing
// changed or leaked.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "cpu/backend/cpu_backend.h"
#include "engine/generation/generator.h"
#include "engine/generation/load_tokenizer.h"
#include "engine/model/model.h"
#include "fixtures.h"
#include "kernels/error.h"

using namespace kvx;
using namespace kvx::test;
namespace fs = std::filesystem;

namespace {

Engine make_engine(const Model& model, int32_t context, int32_t block_size = 16, int32_t num_blocks = 0) {
    EngineOptions o;
    o.context = context;
    o.block_size = block_size;
    o.num_blocks = num_blocks;
    return Engine(model.config, std::make_unique<cpu::CpuBackend>(model, reference_kernels()), o);
}

// A copy of a fixture's model directory that a test may damage.
std::string scratch_copy(const Fixture& f, const std::string& tag) {
    const fs::path dir = fs::temp_directory_path() / ("kvx_test_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(f.model_dir, dir, fs::copy_options::recursive);
    return dir.string();
}

void truncate_file(const std::string& path, uintmax_t size) { fs::resize_file(path, size); }

}  // namespace

TEST_CASE("engine refuses what does not fit and changes nothing", "[engine][errors]") {
    const Fixture f = load_fixture("stories260K");
    const Model model = load_model(f.model_dir);
    const std::vector<int32_t> tokens(f.tokens.begin(), f.tokens.begin() + 20);

    SECTION("context beyond the model's maximum") {
        CHECK_THROWS_WITH(make_engine(model, model.config.max_seq_len + 1),
                          Catch::Contains("exceeds the model's maximum of 512"));
    }
    SECTION("a sequence outgrowing the context") {
        Engine engine = make_engine(model, 16);
        const SeqId s = engine.new_sequence();
        CHECK_THROWS_WITH(engine.forward({{s, tokens, false}}),
                          Catch::Contains("20 tokens, more than the context of 16"));
        CHECK(engine.length(s) == 0);
        CHECK(engine.cache().pool().num_used() == 0);
    }
    SECTION("an exhausted pool") {
        Engine engine = make_engine(model, 64, 4, 6);
        const SeqId a = engine.new_sequence(), b = engine.new_sequence();
        engine.forward({{a, std::span<const int32_t>(tokens).first(16), false}});
        CHECK_THROWS_WITH(engine.forward({{b, std::span<const int32_t>(tokens).first(12), false}}),
                          Catch::Contains("KV cache pool exhausted") && Catch::Contains("needs 3 blocks but 2 of 6"));
        CHECK(engine.length(b) == 0);
        engine.cache().check_invariants();
        engine.free_sequence(a);
        engine.free_sequence(b);
        CHECK(engine.cache().pool().num_used() == 0);
    }
    SECTION("token ids outside the vocabulary") {
        Engine engine = make_engine(model, 64);
        const SeqId s = engine.new_sequence();
        const std::vector<int32_t> bad = {1, 512};
        CHECK_THROWS_WITH(engine.forward({{s, bad, false}}), Catch::Contains("token id 512 is outside the vocabulary of 512"));
        const std::vector<int32_t> negative = {-3};
        CHECK_THROWS_WITH(engine.forward({{s, negative, false}}), Catch::Contains("token id -3"));
        CHECK(engine.length(s) == 0);
    }
    SECTION("the same sequence twice in one pass") {
        Engine engine = make_engine(model, 64);
        const SeqId s = engine.new_sequence();
        CHECK_THROWS_WITH(engine.forward({{s, tokens, false}, {s, tokens, false}}), Catch::Contains("appears twice"));
    }
    SECTION("a sequence id that does not exist: negative, never made, or freed") {
        Engine engine = make_engine(model, 64);
        const SeqId live = engine.new_sequence(), gone = engine.new_sequence();
        engine.free_sequence(gone);
        for (const SeqId bad : {SeqId{-1}, SeqId{12345}, gone}) {
            INFO("sequence id " << bad);
            CHECK_THROWS_WITH(engine.forward({{live, tokens, false}, {bad, tokens, false}}),
                              Catch::Contains("no sequence with id " + std::to_string(bad)));
            CHECK_THROWS_WITH(engine.rewind(bad, 0), Catch::Contains("no sequence with id"));
            CHECK_THROWS_WITH(engine.fork_sequence(bad), Catch::Contains("no sequence with id"));
        }
        CHECK(engine.length(live) == 0);  // the good half of the refused batch was not appended either
        engine.cache().check_invariants();
    }
    SECTION("generation: a prompt longer than the context, or prompt plus -n beyond it") {
        Engine engine = make_engine(model, 16);
        const auto tokenizer = load_tokenizer(model.dir, model.config);
        Sampler sampler(SamplerOptions{0.0f, 0, 1.0f, 0});
        GenerationOptions g;
        g.max_new_tokens = 1;
        auto ignore = [](std::string_view) {};
        CHECK_THROWS_WITH(generate(engine, *tokenizer, sampler, tokens, g, ignore),
                          Catch::Contains("the prompt is 20 tokens, longer than the context of 16"));
        g.max_new_tokens = 10;
        CHECK_THROWS_WITH(generate(engine, *tokenizer, sampler, std::vector<int32_t>(tokens.begin(), tokens.begin() + 8), g, ignore),
                          Catch::Contains("exceed the context of 16"));
        CHECK(engine.cache().num_sequences() == 0);
    }
}

// Element `index` of tensor `name` in a safetensors file set to `value`, where the file's header says it lies.
static void overwrite_float(const std::string& weights, const std::string& name, size_t index, float value) {
    std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_len = 0;
    file.read(reinterpret_cast<char*>(&header_len), 8);
    std::string header(header_len, '\0');
    file.read(header.data(), static_cast<std::streamsize>(header_len));
    const auto begin = nlohmann::json::parse(header)[name]["data_offsets"][0].get<uint64_t>();
    file.seekp(static_cast<std::streamoff>(8 + header_len + begin + index * sizeof(float)));
    file.write(reinterpret_cast<const char*>(&value), sizeof value);
}

TEST_CASE("a KV pool larger than the memory available is refused before it is allocated", "[engine][errors]") {
    // INT32_MAX blocks of stories260K's 20 KB: 44 TB, refused by its size rather than by the system killing
    // kvx as the zero-filled pages were touched.
    const Model model = load_model(load_fixture("stories260K").model_dir);
    CHECK_THROWS_WITH(make_engine(model, 0, 16, INT32_MAX),
                      Catch::Contains("the KV cache needs 43980465090560 bytes, more than the") &&
                          Catch::Contains("bytes of memory available (lower -c"));
}

TEST_CASE("damaged model directories are refused by name", "[engine][errors]") {
    const Fixture f = load_fixture("stories260K");
    const std::string dir = scratch_copy(f, "damaged");
    const std::string weights = dir + "/model.safetensors";
    const auto full_size = fs::file_size(weights);

    SECTION("truncated weights") {
        truncate_file(weights, full_size - 100);
        CHECK_THROWS_WITH(load_model(dir), Catch::Contains("is corrupt") && Catch::Contains("truncated"));
    }
    SECTION("a weights file shorter than its header") {
        truncate_file(weights, 5);
        CHECK_THROWS_WITH(load_model(dir), Catch::Contains("shorter than its 8-byte header"));
    }
    SECTION("a header length beyond the file") {
        std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
        const uint64_t huge = uint64_t{1} << 40;
        file.write(reinterpret_cast<const char*>(&huge), 8);
        file.close();
        CHECK_THROWS_WITH(load_model(dir), Catch::Contains("exceeds the file"));
    }
    SECTION("a damaged header") {
        std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
        file.seekp(9);
        file.write("\x01\x02\x03", 3);
        file.close();
        CHECK_THROWS_WITH(load_model(dir), Catch::Contains("is corrupt: its header is not valid JSON"));
    }
    SECTION("a config that disagrees with the weights") {
        std::ifstream in(dir + "/config.json");
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        in.close();
        const auto at = text.find("\"hidden_dim\"");
        REQUIRE(at != std::string::npos);
        const auto value_at = text.find_first_of("0123456789", at);
        text.replace(value_at, text.find_first_not_of("0123456789", value_at) - value_at, "173");
        std::ofstream(dir + "/config.json") << text;
        CHECK_THROWS_WITH(load_model(dir), Catch::Contains("layers.0.w_gate") && Catch::Contains("[173, 64]"));
    }
    SECTION("a missing model") {
        CHECK_THROWS_WITH(load_model(dir + "/nowhere"), Catch::Contains("no model at"));
    }
    SECTION("a NaN rope frequency, refused at load") {
        overwrite_float(weights, "rope_inv_freq", 3, std::nanf(""));
        CHECK_THROWS_WITH(load_model(dir), Catch::Contains("rope_inv_freq[3] is not a finite number"));
    }
    SECTION("NaN and infinite weights, refused by the full check (kvx --check-weights)") {
        overwrite_float(weights, "layers.1.wq", 17, std::numeric_limits<float>::infinity());
        overwrite_float(weights, "layers.1.wq", 40, std::nanf(""));
        const Model model = load_model(dir);  // a matrix is not read at load: only the check reads it all
        CHECK_THROWS_WITH(check_weights_finite(model),
                          Catch::Contains("tensor 'layers.1.wq' holds 2 non-finite values (NaN or infinity) of 4096"));
    }
    SECTION("a tokenizer that does not fit the vocabulary") {
        truncate_file(dir + "/tokenizer.bin", fs::file_size(dir + "/tokenizer.bin") - 7);
        const Model model = load_model(dir);
        CHECK_THROWS_WITH(load_tokenizer(dir, model.config), Catch::Contains("truncated"));
    }
    fs::remove_all(dir);
}

TEST_CASE("random truncations and corruptions of the weights never crash the loader", "[engine][errors]") {
    // Under the sanitizer build this is a small fuzz run: every outcome must be a model or a kvx::Error.
    const Fixture f = load_fixture("stories260K");
    const std::string dir = scratch_copy(f, "fuzz");
    const std::string weights = dir + "/model.safetensors";
    std::string original;
    {
        std::ifstream in(weights, std::ios::binary);
        original.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    uint64_t header_len = 0;
    std::memcpy(&header_len, original.data(), 8);
    std::mt19937 rng(7);
    int refused = 0;
    for (int trial = 0; trial < 200; ++trial) {
        std::string damaged = original;
        if (trial % 2 == 0) {
            damaged.resize(rng() % original.size());
        } else {
            // Flip bytes in the length field and the JSON header, where the loader must not trust anything.
            for (int flips = 0; flips < 3; ++flips)
                damaged[rng() % (8 + header_len)] = static_cast<char>(rng());
        }
        std::ofstream(weights, std::ios::binary | std::ios::trunc).write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
        try {
            load_model(dir);
        } catch (const Error&) {
            ++refused;
        }
    }
    CHECK(refused >= 100);  // every truncation is refused; some flips land in harmless header bytes
    fs::remove_all(dir);
}
