// The byte-level BPE tokenizer's refusals and kvx's own rules around it: what it does not implement is a
// kvx::Error naming the component, a tokenizer larger than the model's vocabulary is refused, add_bos takes
// the post-processor's tokens before the text only, and encoding is safe from several threads. Agreement
// with HF tokenizers, string by string, is tests/tokenizer_bpe_corpus_test.cpp.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

#include "engine/generation/load_tokenizer.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer_bpe.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/error.h"

using namespace kvx;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string shared_models = std::string(KVX_SHARED_DIR) + "/models";

// A scratch directory, removed at the end of the test.
struct ScratchDir {
    fs::path path = fs::temp_directory_path() / ("kvx_bpe_test_" + std::to_string(::getpid()));
    ScratchDir() { fs::create_directories(path); }
    ~ScratchDir() { fs::remove_all(path); }
    std::string write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name, std::ios::binary) << text;
        return (path / name).string();
    }
};

// A small byte-level BPE tokenizer.json: the 256 byte symbols (ids 0..255), "ab" (256), "abc" (257), an
// added token <|x|> (258) and the components of an HF GPT-2 tokenizer.
json tiny_tokenizer() {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_level::text_of_bytes(std::string(1, static_cast<char>(b)))] = b;
    vocab["ab"] = 256;
    vocab["abc"] = 257;
    return {
        {"version", "1.0"},
        {"added_tokens", json::array({{{"id", 258}, {"content", "<|x|>"}, {"special", true}, {"normalized", false},
                                       {"lstrip", false}, {"rstrip", false}, {"single_word", false}}})},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor", {{"type", "ByteLevel"}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", json::array({"ab", "c"})})}}},
    };
}

BpeTokenizer load(const ScratchDir& dir, const json& j) {
    return BpeTokenizer(read_hf_tokenizer_json(dir.write("tokenizer.json", j.dump())));
}

}  // namespace

TEST_CASE("BPE: merges by rank within words, added tokens cut out first", "[tokenizer][bpe]") {
    const ScratchDir dir;
    const BpeTokenizer tok = load(dir, tiny_tokenizer());
    // "abc" merges a+b (rank 0), then ab+c (rank 1); " ab" is a word of its own (GPT-2's pattern).
    CHECK(tok.encode("abc ab<|x|>", false) == std::vector<int32_t>{257, ' ', 256, 258});
    CHECK(tok.encode("", true).empty());
    CHECK(tok.n_tokens() == 259);
    CHECK(tok.max_id() == 258);
    CHECK(tok.decode(-1, 258) == "<|x|>");
    CHECK(tok.decode(-1, 0x0A) == "\n");  // 'Ċ' in the alphabet
    CHECK(tok.decode(-1, 9999).empty());  // no token has it: nothing, as in HF
}

TEST_CASE("BPE: text that is not UTF-8 is refused", "[tokenizer][bpe][errors]") {
    const ScratchDir dir;
    const BpeTokenizer tok = load(dir, tiny_tokenizer());
    CHECK_THROWS_WITH(tok.encode("ok \xC3", false), Catch::Contains("not valid UTF-8 (byte 3 of 4)"));
    CHECK_THROWS_WITH(tok.encode("\xED\xA0\x80", false), Catch::Contains("not valid UTF-8 (byte 0"));  // a surrogate
    CHECK_THROWS_WITH(tok.encode("\xC0\xAF", false), Catch::Contains("not valid UTF-8"));           // overlong '/'
}

TEST_CASE("BPE: add_bos takes what the post-processor puts before the text, never after", "[tokenizer][bpe]") {
    const ScratchDir dir;
    json j = tiny_tokenizer();
    j["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", {"<|x|>", 258}}, {"sep", {"abc", 257}}};
    CHECK(load(dir, j).encode("ab", true) == std::vector<int32_t>{258, 256});
    j["post_processor"] = {
        {"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}},
          {{"type", "TemplateProcessing"},
           {"single", {{{"SpecialToken", {{"id", "<|x|>"}, {"type_id", 0}}}},
                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                       {{"SpecialToken", {{"id", "abc"}, {"type_id", 0}}}}}},
           {"special_tokens", {{"<|x|>", {{"id", "<|x|>"}, {"ids", {258}}, {"tokens", {"<|x|>"}}}},
                               {"abc", {{"id", "abc"}, {"ids", {257}}, {"tokens", {"abc"}}}}}}}}}};
    const BpeTokenizer tok = load(dir, j);
    CHECK(tok.encode("ab", true) == std::vector<int32_t>{258, 256});
    CHECK(tok.encode("ab", false) == std::vector<int32_t>{256});
}

TEST_CASE("BPE: components kvx does not implement are named", "[tokenizer][bpe][errors]") {
    const ScratchDir dir;
    auto refused = [&](const std::string& what, auto edit, const std::string& message) {
        INFO(what);
        json j = tiny_tokenizer();
        edit(j);
        CHECK_THROWS_WITH(load(dir, j), Catch::Contains(message));
    };
    refused("normalizer", [](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer 'NFKC' is not supported");
    refused("pre-tokenizer", [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; },
            "does not end with ByteLevel");
    refused("pre-tokenizer in a sequence",
            [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}, j["pre_tokenizer"]}}}; },
            "pre_tokenizer 'Whitespace' is not supported");
    refused("ByteLevel first",
            [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {j["pre_tokenizer"], j["pre_tokenizer"]}}}; },
            "ByteLevel before another pre-tokenizer");
    refused("Split behavior",
            [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Sideways"}}, j["pre_tokenizer"]}}}; },
            "Split behavior 'Sideways' is not supported");
    refused("Split regex",
            [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}}, j["pre_tokenizer"]}}}; },
            "bad regex '(a' at offset 2");
    refused("decoder", [](json& j) { j["decoder"] = nullptr; }, "decoder 'null' is not supported");
    refused("model", [](json& j) { j["model"]["type"] = "WordPiece"; }, "model type 'WordPiece' is not supported");
    refused("dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, "BPE dropout is not supported");
    refused("prefix", [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "continuing_subword_prefix is not supported");
    refused("post-processor", [](json& j) { j["post_processor"] = {{"type", "Mystery"}}; }, "post_processor 'Mystery' is not supported");
    refused("template without $A",
            [](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", json::array()}, {"special_tokens", json::object()}}; },
            "has no $A");
    refused("merge part", [](json& j) { j["model"]["merges"].push_back("zz q"); }, "merge part 'zz' is not in the vocabulary");
    refused("merge result", [](json& j) { j["model"]["merges"].push_back("b a"); }, "the result of merge 'ba' is not in the vocabulary");
    refused("merge shape", [](json& j) { j["model"]["merges"].push_back("a b c"); }, "merge 2 'a b c' is not two tokens");
    refused("unk", [](json& j) { j["model"]["unk_token"] = "<unk>"; }, "unk_token '<unk>' is not in the vocabulary");
    refused("vocabulary", [](json& j) { j["model"]["vocab"]["x"] = -4; }, "the id of vocabulary entry 'x' must be an integer from 0 to 4194303, not -4");

    CHECK_THROWS_WITH(read_hf_tokenizer_json(dir.write("cut.json", tiny_tokenizer().dump().substr(0, 300))),
                      Catch::Contains("is not valid JSON (parse error"));
    CHECK_THROWS_WITH(read_hf_tokenizer_json((dir.path / "missing.json").string()), Catch::Contains("cannot open tokenizer"));
    CHECK_THROWS_WITH(read_gpt2_tokenizer(shared_models + "/gpt2-tokenizer/encoder.json", dir.write("empty.bpe", "#version: 0.2\n")),
                      Catch::Contains("holds no merges"));
}

TEST_CASE("BPE: a tokenizer with more ids than the model's vocabulary is refused", "[tokenizer][bpe][errors]") {
    // The ONNX Runtime GenAI tiny GPT-2 has a vocabulary of 1000 and ships GPT-2's full tokenizer.json
    // (with 38 added whitespace tokens).
    const std::string dir = shared_models + "/ortgenai-tiny-random-gpt2-fp32";
    ModelConfig config;
    config.tokenizer_type = "bpe";
    config.tokenizer_file = "tokenizer.json";
    config.vocab_size = 1000;
    CHECK_THROWS_WITH(load_tokenizer(dir, config),
                      "tokenizer '" + dir + "/tokenizer.json' has 50295 tokens (ids up to 50294) but the model's "
                      "vocabulary has 1000");
    config.vocab_size = 50295;
    CHECK(load_tokenizer(dir, config)->encode("<|endoftext|>", false) == std::vector<int32_t>{50256});

    ModelConfig gpt2;
    gpt2.tokenizer_type = "gpt2";
    gpt2.tokenizer_file = "encoder.json";
    gpt2.tokenizer_merges_file = "vocab.bpe";
    gpt2.vocab_size = 50000;
    CHECK_THROWS_WITH(load_tokenizer(shared_models + "/gpt2-tokenizer", gpt2),
                      Catch::Contains("has 50257 tokens (ids up to 50256) but the model's vocabulary has 50000"));
}

TEST_CASE("BPE: encoding from several threads gives what one thread gives", "[tokenizer][bpe]") {
    const std::string gpt2 = shared_models + "/gpt2-tokenizer";
    const BpeTokenizer tok(read_gpt2_tokenizer(gpt2 + "/encoder.json", gpt2 + "/vocab.bpe"));
    std::vector<std::string> texts;
    for (int i = 0; i < 400; ++i)
        texts.push_back("word" + std::to_string(i * 7919 % 1000) + " caf\xC3\xA9 " + std::string(static_cast<size_t>(i % 5), ' ') + "end");
    std::vector<std::vector<int32_t>> expected;
    for (const auto& t : texts) expected.push_back(tok.encode(t, false));
    const BpeTokenizer fresh(read_gpt2_tokenizer(gpt2 + "/encoder.json", gpt2 + "/vocab.bpe"));  // empty word cache
    std::vector<int> wrong(4, 0);
    std::vector<std::thread> threads;
    for (int w = 0; w < 4; ++w)
        threads.emplace_back([&, w] {
            for (int round = 0; round < 3; ++round)
                for (size_t i = static_cast<size_t>(w); i < texts.size(); i += 2) wrong[static_cast<size_t>(w)] += fresh.encode(texts[i], false) != expected[i];
        });
    for (auto& t : threads) t.join();
    CHECK(wrong == std::vector<int>(4, 0));
}

TEST_CASE("BPE: model config names the tokenizer files and the chat template", "[tokenizer][bpe][config]") {
    const ScratchDir dir;
    json config = {{"format", "kvx-model"}, {"format_version", 1}, {"architecture", "llama"}, {"dim", 8},
                   {"hidden_dim", 8}, {"n_layers", 1}, {"n_heads", 1}, {"n_kv_heads", 1}, {"head_dim", 8},
                   {"vocab_size", 50257}, {"max_seq_len", 16}, {"norm_eps", 1e-5}, {"rope_style", "half"},
                   {"weights", {{"file", "model.safetensors"}, {"dtype", "f32"}}},
                   {"tokenizer", {{"type", "gpt2"}, {"file", "encoder.json"}, {"merges_file", "vocab.bpe"}}},
                   {"chat", {{"template_file", "chat_template.jinja"}, {"format", "chatml"}}}};
    dir.write("config.json", config.dump());
    const ModelConfig c = load_model_config(dir.path.string());
    CHECK(c.tokenizer_type == "gpt2");
    CHECK(c.tokenizer_merges_file == "vocab.bpe");
    CHECK(c.chat.template_file == "chat_template.jinja");
    CHECK(c.chat.format == "chatml");

    config["tokenizer"].erase("merges_file");
    dir.write("config.json", config.dump());
    CHECK_THROWS_WITH(load_model_config(dir.path.string()), Catch::Contains("'tokenizer.merges_file' is missing"));
    config["tokenizer"] = {{"type", "sentencepiece"}, {"file", "x.model"}};
    dir.write("config.json", config.dump());
    CHECK_THROWS_WITH(load_model_config(dir.path.string()), Catch::Contains("'tokenizer.type' = 'sentencepiece' is not a tokenizer kvx reads"));
    config["tokenizer"] = nullptr;
    config["chat"] = {{"path", "x"}};
    dir.write("config.json", config.dump());
    CHECK_THROWS_WITH(load_model_config(dir.path.string()), Catch::Contains("'chat.template_file' is missing"));
    config["chat"] = {{"template_file", "t.jinja"}, {"format", "llama2"}};
    dir.write("config.json", config.dump());
    CHECK_THROWS_WITH(load_model_config(dir.path.string()), Catch::Contains("'chat.format' = 'llama2' is not a format kvx applies"));
}

TEST_CASE("a UTF-8 sequence's length is read from its first byte", "[tokenizer][utf8]") {
    for (char32_t cp : {U'A', U'\u00e9', U'\u07ff', U'\u0800', U'\u20ac', U'\uffff', U'\U00010000', U'\U0001F600'}) {
        std::string encoded;
        utf8_append(encoded, cp);
        INFO("U+" << std::hex << static_cast<uint32_t>(cp));
        CHECK(utf8_sequence_length(static_cast<unsigned char>(encoded[0])) == encoded.size());
    }
    CHECK(utf8_sequence_length(0x00) == 1);
    CHECK(utf8_sequence_length(0x80) == 1);  // continuation bytes lead nothing: each stands alone
    CHECK(utf8_sequence_length(0xBF) == 1);
    CHECK(utf8_sequence_length(0xC0) == 2);
    CHECK(utf8_sequence_length(0xDF) == 2);
    CHECK(utf8_sequence_length(0xE0) == 3);
    CHECK(utf8_sequence_length(0xEF) == 3);
    CHECK(utf8_sequence_length(0xF0) == 4);
    CHECK(utf8_sequence_length(0xFF) == 4);
}
