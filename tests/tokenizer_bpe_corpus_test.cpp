// kvx's byte-level BPE tokenizers against HF tokenizers, string by string: the corpus and HF's ids for it
// are written by tools/kvx_tools/fixtures/make_tokenizer_corpus.py (ctest runs it first), and every string must
// encode to exactly HF's ids, with and without the post-processor's prefix, and decode back to itself
// wherever HF's decoding does.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/tokenizer/tokenizer_bpe.h"

using namespace kvx;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string corpus_dir() {
    const char* dir = std::getenv("KVX_TOKENIZER_CORPUS");
    if (!dir || !*dir) FAIL("KVX_TOKENIZER_CORPUS is not set: run the tests through ctest, which writes the corpus first");
    return dir;
}

json load_corpus(const std::string& name) {
    const std::string path = corpus_dir() + "/" + name + ".json";
    std::ifstream in(path);
    if (!in) FAIL("no corpus " << path);
    return json::parse(in);
}

BpeTokenizer make_tokenizer(const json& t) {
    if (t.at("type") == "gpt2")
        return BpeTokenizer(read_gpt2_tokenizer(t.at("file").get<std::string>(), t.at("merges_file").get<std::string>()));
    return BpeTokenizer(read_hf_tokenizer_json(t.at("file").get<std::string>()));
}

// The text as a JSON string with everything outside ASCII escaped, cut at 300 characters, so that a
// failing case can be read.
std::string escaped(const std::string& text) {
    const std::string dumped = json(text).dump(-1, ' ', /*ensure_ascii=*/true);
    return dumped.size() > 300 ? dumped.substr(0, 300) + "..." : dumped;
}

std::string ids_text(const std::vector<int32_t>& ids) {
    std::ostringstream out;
    for (size_t i = 0; i < ids.size() && i < 40; ++i) out << (i ? "," : "") << ids[i];
    if (ids.size() > 40) out << ",... (" << ids.size() << ")";
    return out.str();
}

void check_corpus(const std::string& name) {
    const json corpus = load_corpus(name);
    const BpeTokenizer tok = make_tokenizer(corpus.at("tokenizer"));
    const auto& cases = corpus.at("cases");
    REQUIRE(cases.size() >= 2000);
    size_t mismatches = 0, round_trips = 0, reported = 0;
    for (const json& c : cases) {
        const auto text = c.at("text").get<std::string>();
        const auto expected = c.at("ids").get<std::vector<int32_t>>();
        const auto expected_bos = c.at("ids_bos").get<std::vector<int32_t>>();
        const std::vector<int32_t> got = tok.encode(text, false);
        const std::vector<int32_t> got_bos = tok.encode(text, true);
        std::string decoded;
        for (int32_t id : got) decoded += tok.decode(-1, id);
        const bool round_trip = c.at("round_trip").get<bool>();
        round_trips += round_trip;
        const bool ok = got == expected && got_bos == expected_bos && (!round_trip || decoded == text);
        if (ok) continue;
        ++mismatches;
        if (++reported <= 5)
            FAIL_CHECK(name << ": text " << escaped(text) << "\n  HF:  " << ids_text(expected) << "\n  kvx: "
                            << ids_text(got) << "\n  with prefix HF " << ids_text(expected_bos) << " kvx "
                            << ids_text(got_bos) << "\n  decodes back: " << (decoded == text));
    }
    INFO(name << ": " << cases.size() << " strings (" << round_trips << " that HF decodes back), reference "
              << corpus.at("reference").get<std::string>());
    CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("BPE corpus: GPT-2's encoder.json + vocab.bpe encode as HF tokenizers", "[tokenizer][bpe]") {
    check_corpus("gpt2_files");
}

TEST_CASE("BPE corpus: the ONNX Runtime GenAI GPT-2 tokenizer.json (added whitespace tokens)", "[tokenizer][bpe]") {
    check_corpus("ortgenai_gpt2");
}

TEST_CASE("BPE corpus: Split regex, ignore_merges, BOS template, lstrip/rstrip/single_word tokens", "[tokenizer][bpe]") {
    check_corpus("gpt2_llama3_split");
}

TEST_CASE("BPE corpus: Digits, add_prefix_space, unk_token with fuse_unk", "[tokenizer][bpe]") {
    check_corpus("gpt2_digits_unk");
}

TEST_CASE("BPE corpus: every Split behavior, inverted and String patterns, byte_fallback", "[tokenizer][bpe]") {
    check_corpus("gpt2_split_behaviors");
}

TEST_CASE("BPE corpus: SmolLM2's tokenizer.json", "[tokenizer][bpe]") {
    // The corpus step (after SmolLM2's fixture step) writes this case when the model was fetched.
    if (!fs::is_regular_file(corpus_dir() + "/smollm2.json")) {
        WARN("SKIPPED: the corpus has no SmolLM2 case (its fixture could not be fetched, see docs/testing.md)");
        return;
    }
    check_corpus("smollm2");
}
