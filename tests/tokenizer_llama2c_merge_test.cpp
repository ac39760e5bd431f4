// The llama2.c tokenizer's merge (a priority queue, O(n log n)) against the loop it replaced (a rescan of
// every adjacent pair after each merge, O(n^2)), kept below as the oracle: the same tokens for the strings
// of the other tests, thousands of random strings (vocabulary pieces, random bytes, invalid and multi-byte
// UTF-8, spaces, newlines), long texts, and vocabularies whose scores tie often. Speed is kvx-bench's
// business (tokenizer_encode), not this file's.
#include <catch2/catch.hpp>
#include <cstdio>
#include <limits>
#include <random>
#include <unordered_map>

#include "engine/tokenizer/tokenizer_llama2c.h"
#include "kernels/error.h"
#include "tokenizer_llama2c_support.h"

using namespace kvx;
using kvx::test::Llama2cFile;
using kvx::test::TempFile;
using kvx::test::tok512_path;

namespace {

// ---------------------------------------------------------------------------------------------------------
// THE ORACLE: Llama2cTokenizer::encode as it was before the priority queue, copied unchanged but for the
// vocabulary it reads (the tokenizer's public pieces, and scores from the file by the tests' own reader).
// Quadratic: keep what it is given to tens of kilobytes.
struct ReferenceVocabulary {
    std::vector<std::string> pieces;                 // [vocab_size]
    std::vector<float> scores;                       // [vocab_size]
    std::unordered_map<std::string, int32_t> ids;    // piece -> lowest id holding it
    int32_t byte_ids[256];                           // [byte] id of <0xNN>, or -1
    int32_t bos_id = 1;

    ReferenceVocabulary(const Llama2cTokenizer& tok, const std::string& path) {
        scores = Llama2cFile::read(path).scores;
        REQUIRE(static_cast<int>(scores.size()) == tok.vocab_size());
        for (int32_t id = 0; id < tok.vocab_size(); ++id) {
            pieces.push_back(tok.piece(id));
            ids.emplace(pieces.back(), id);
        }
        for (int byte = 0; byte < 256; ++byte) {
            char name[8];
            std::snprintf(name, sizeof(name), "<0x%02X>", byte);
            const auto it = ids.find(name);
            byte_ids[byte] = it == ids.end() ? -1 : it->second;
        }
    }
    const std::string& piece(int32_t token) const { return pieces.at(static_cast<size_t>(token)); }
    int32_t lookup(std::string_view piece) const {
        auto it = ids.find(std::string(piece));
        return it == ids.end() ? -1 : it->second;
    }
};

std::vector<int32_t> reference_encode(const ReferenceVocabulary& v, std::string_view text, bool add_bos) {
    std::vector<int32_t> tokens;
    if (add_bos && v.bos_id >= 0) tokens.push_back(v.bos_id);
    if (text.empty()) return tokens;
    const size_t first = tokens.size();

    const int32_t space = v.lookup(" ");
    if (space >= 0) tokens.push_back(space);

    for (size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        size_t len = 1;
        if (lead >= 0xF0) len = 4;
        else if (lead >= 0xE0) len = 3;
        else if (lead >= 0xC0) len = 2;
        while (len > 1 && (i + len > text.size())) --len;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) { len = k; break; }
        const int32_t id = v.lookup(text.substr(i, len));
        if (id >= 0) {
            tokens.push_back(id);
        } else {
            for (size_t k = 0; k < len; ++k) {
                const int32_t byte_id = v.byte_ids[static_cast<unsigned char>(text[i + k])];
                if (byte_id < 0) throw Error("the tokenizer cannot encode byte " + std::to_string(static_cast<unsigned char>(text[i + k])));
                tokens.push_back(byte_id);
            }
        }
        i += len;
    }

    std::string merged;
    for (;;) {
        float best_score = -std::numeric_limits<float>::infinity();
        int32_t best_id = -1;
        size_t best_at = 0;
        for (size_t i = first; i + 1 < tokens.size(); ++i) {
            merged = v.piece(tokens[i]);
            merged += v.piece(tokens[i + 1]);
            const int32_t id = v.lookup(merged);
            if (id >= 0 && v.scores[static_cast<size_t>(id)] > best_score) {
                best_score = v.scores[static_cast<size_t>(id)];
                best_id = id;
                best_at = i;
            }
        }
        if (best_id < 0) break;
        tokens[best_at] = best_id;
        tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    return tokens;
}
// END OF THE ORACLE
// ---------------------------------------------------------------------------------------------------------

// The text with every byte outside printable ASCII as \xNN, for a failure's message.
std::string escaped(std::string_view text) {
    std::string out;
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte >= 0x20 && byte < 0x7F && byte != '\\') {
            out += c;
        } else {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "\\x%02X", byte);
            out += hex;
        }
    }
    return out;
}

// Both encoders on every text, with BOS and, unless `bos_only` (the oracle is slow on long texts), without;
// returns how many texts were compared.
size_t check_same_tokens(const Llama2cTokenizer& tok, const ReferenceVocabulary& oracle, const std::vector<std::string>& texts,
                         bool bos_only = false) {
    size_t mismatches = 0;
    for (const std::string& text : texts) {
        for (const bool bos : {true, false}) {
            if (!bos && bos_only) continue;
            const auto got = tok.encode(text, bos);
            if (got == reference_encode(oracle, text, bos)) continue;
            if (++mismatches <= 5) {  // a few in full, not thousands
                INFO("text (" << text.size() << " bytes): " << escaped(text.substr(0, 200)));
                CHECK(got == reference_encode(oracle, text, bos));
            }
        }
    }
    CHECK(mismatches == 0);
    return texts.size();
}

// A random number in 0..n-1.
size_t below(std::mt19937& rng, size_t n) { return static_cast<size_t>(rng()) % n; }

// The strings of tokenizer_llama2c_test.cpp and the fixed ones of tests/cli/test_tokenizer_llama2c.py, and
// 400 made by that script's recipe (1 to 12 vocabulary words or extras, joined by a random separator) with
// this file's generator.
std::vector<std::string> corpus_of_the_other_tests(const ReferenceVocabulary& v) {
    std::vector<std::string> texts = {
        "", "Once upon a time", "caf\xC3\xA9 \xF0\x9F\x98\x80 ~\t{x}", std::string("a\x01" "b", 3),
        "Lily and Ben went to the park.", "  two  spaces", "line\nbreak\n\n", "123 + 456 = 579",
        "\"Quotes,\" she said; 'don't!'", "UPPER lower MiXeD", "x",
        " ", "a", "Lily and Ben", "Hello, world!", "\n\n", "  leading", "trailing  "};
    const std::vector<std::string> extra = {
        "\xC3\xA9", "\xC3\xBC", "\xC3\x9F", "\xE4\xB8\xAD\xE6\x96\x87", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
        "\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "\t", "\n", "  ", "   ", "'s", "n't", "123", "4.5",
        "{", "}", "()", "->", "==", "#include", "x = y + 1;", "\"quoted\"", "\xE2\x80\x94", "\xE2\x80\xA6",
        "na\xC3\xAFve caf\xC3\xA9"};
    texts.insert(texts.end(), extra.begin(), extra.end());
    std::vector<std::string> words;  // the script's: the non-blank merged pieces, stripped
    for (size_t id = 259; id < v.pieces.size(); ++id) {
        const std::string& p = v.pieces[id];
        const size_t begin = p.find_first_not_of(" \t\n\r\v\f");
        if (begin != std::string::npos) words.push_back(p.substr(begin, p.find_last_not_of(" \t\n\r\v\f") + 1 - begin));
    }
    const std::vector<std::string> separators = {" ", "", "  ", "\n", " ", " "};
    std::mt19937 rng(2024);
    auto pick = [&](const std::vector<std::string>& from) { return from[below(rng, from.size())]; };
    for (int i = 0; i < 400; ++i) {
        const std::string sep = pick(separators);
        const size_t parts = 1 + below(rng, 12);
        std::string text;
        for (size_t k = 0; k < parts; ++k) text += (k ? sep : "") + pick(below(rng, 4) < 3 ? words : extra);
        texts.push_back(text);
    }
    return texts;
}

// One valid UTF-8 encoding of a code point of 2, 3 or 4 bytes (surrogates excluded).
std::string utf8_code_point(std::mt19937& rng) {
    switch (below(rng, 3)) {
    case 0: {
        const auto c = static_cast<uint32_t>(0x80 + below(rng, 0x800 - 0x80));
        return {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    case 1: {
        auto c = static_cast<uint32_t>(0x800 + below(rng, 0x10000 - 0x800));
        if (c >= 0xD800 && c < 0xE000) c -= 0x800;
        return {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    default: {
        const auto c = static_cast<uint32_t>(0x10000 + below(rng, 0x110000 - 0x10000));
        return {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
                static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    }
}

// A text of up to max_bytes bytes, built from vocabulary pieces (byte pieces' own text "<0x41>" included),
// random bytes (so invalid UTF-8: stray continuation bytes, cut sequences), whole multi-byte code points,
// the lead of one without its tail, spaces and newlines.
std::string random_text(std::mt19937& rng, const ReferenceVocabulary& v, size_t max_bytes) {
    const size_t length = below(rng, max_bytes + 1);
    std::string text;
    while (text.size() < length) {
        const size_t kind = below(rng, 100);
        if (kind < 45) text += v.pieces[below(rng, v.pieces.size())];
        else if (kind < 60) text += static_cast<char>(below(rng, 256));
        else if (kind < 70) text += utf8_code_point(rng);
        else if (kind < 75) text += utf8_code_point(rng).substr(0, 1 + below(rng, 2));
        else if (kind < 90) text += ' ';
        else if (kind < 95) text += '\n';
        else text += std::string(1 + below(rng, 4), ' ');
    }
    text.resize(length);  // may cut the last code point: more invalid UTF-8
    return text;
}

std::vector<std::string> random_texts(uint32_t seed, const ReferenceVocabulary& v, int count, size_t max_bytes) {
    std::mt19937 rng(seed);
    std::vector<std::string> texts;
    for (int i = 0; i < count; ++i) texts.push_back(random_text(rng, v, max_bytes));
    return texts;
}

std::string repeated_to(const std::string& unit, size_t bytes) {
    std::string text;
    while (text.size() < bytes) text += unit;
    text.resize(bytes);
    return text;
}

}  // namespace

TEST_CASE("llama2.c tokenizer merge: the other tests' strings give the oracle's tokens", "[tokenizer]") {
    const Llama2cTokenizer tok(tok512_path, 512, 1);
    const ReferenceVocabulary oracle(tok, tok512_path);
    CHECK(check_same_tokens(tok, oracle, corpus_of_the_other_tests(oracle)) == 444);
}

TEST_CASE("llama2.c tokenizer merge: random strings give the oracle's tokens", "[tokenizer]") {
    const Llama2cTokenizer tok(tok512_path, 512, 1);
    const ReferenceVocabulary oracle(tok, tok512_path);
    CHECK(check_same_tokens(tok, oracle, random_texts(1, oracle, 5000, 300)) == 5000);
}

TEST_CASE("llama2.c tokenizer merge: long texts give the oracle's tokens", "[tokenizer]") {
    const Llama2cTokenizer tok(tok512_path, 512, 1);
    const ReferenceVocabulary oracle(tok, tok512_path);
    const std::string golden = kvx::test::file_bytes(std::string(KVX_SOURCE_DIR) + "/testdata/models/stories260K/golden_greedy_n256_runc.txt");
    REQUIRE(!golden.empty());
    std::mt19937 rng(7);
    // 20 KB of story (the same merges at many places: leftmost first), 8 KB of the random mix, and 4 KB of
    // one letter, where every pair is the same candidate.
    const std::vector<std::string> texts = {repeated_to(golden, 20 * 1024), random_text(rng, oracle, 8 * 1024) + "x",
                                            std::string(4 * 1024, 'e'), repeated_to(" the", 4 * 1024)};
    check_same_tokens(tok, oracle, texts, true);
}

TEST_CASE("llama2.c tokenizer merge: vocabularies whose scores tie give the oracle's tokens", "[tokenizer]") {
    // tok512's merge scores are nearly all distinct; here they fall into 4 values, or are all 0, so that
    // different pieces tie and only the position (leftmost first) decides.
    for (const int buckets : {4, 1}) {
        Llama2cFile f = Llama2cFile::read(tok512_path);
        for (size_t id = 259; id < f.scores.size(); ++id) f.scores[id] = -static_cast<float>(id % static_cast<size_t>(buckets));
        const TempFile file("tok_tied_scores.bin", f.bytes());
        const Llama2cTokenizer tok(file.path(), 512, 1);
        const ReferenceVocabulary oracle(tok, file.path());
        INFO("buckets " << buckets);
        check_same_tokens(tok, oracle, corpus_of_the_other_tests(oracle));
        check_same_tokens(tok, oracle, random_texts(static_cast<uint32_t>(buckets), oracle, 2000, 300));
    }
}
