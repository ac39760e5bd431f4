// The llama2.c tokenizer on the real tok512.bin. Token-for-token agreement with an independent
// implementation is checked by tests/cli/test_tokenizer_llama2c.py; these are its decoding rules and
// round trips.
#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/tokenizer/tokenizer_llama2c.h"
#include "kernels/error.h"

using namespace kvx;

namespace {

const std::string tok512 = std::string(KVX_SOURCE_DIR) + "/testdata/models/stories260K/tok512.bin";

std::string decode_all(const Llama2cTokenizer& tok, const std::vector<int32_t>& ids) {
    std::string text;
    int32_t prev = -1;
    for (int32_t id : ids) {
        text += tok.decode(prev, id);
        prev = id;
    }
    return text;
}

SentencePieceOptions options(bool add_dummy_prefix, std::vector<int32_t> user_defined = {},
                             std::vector<int32_t> control = {}) {
    return {add_dummy_prefix, std::move(user_defined), std::move(control)};
}

}  // namespace

TEST_CASE("llama2.c tokenizer: BOS, dummy prefix and the space after BOS", "[tokenizer]") {
    const Llama2cTokenizer tok(tok512, 512, 1);
    CHECK(tok.encode("", true) == std::vector<int32_t>{1});
    CHECK(tok.encode("", false).empty());
    const auto ids = tok.encode("Once upon a time", true);
    REQUIRE(ids.size() >= 2);
    CHECK(ids[0] == 1);
    CHECK(tok.piece(ids[1]).front() == ' ');  // SentencePiece's dummy prefix
    CHECK(decode_all(tok, ids) == "Once upon a time");
}

TEST_CASE("llama2.c tokenizer: without the dummy prefix (Gemma's add_space_prefix = false)", "[tokenizer]") {
    const Llama2cTokenizer with(tok512, 512, 1, options(true));
    const Llama2cTokenizer without(tok512, 512, 1, options(false));
    // The text is merged as it stands: its first word has no leading space.
    const auto a = with.encode("Once upon a time", true);
    const auto b = without.encode("Once upon a time", true);
    REQUIRE(a.size() >= 2);
    REQUIRE(b.size() >= 2);
    CHECK(b[0] == 1);  // BOS comes first either way; it does not add or remove the prefix (llama.cpp's SPM rule)
    CHECK(with.piece(a[1]).front() == ' ');
    CHECK(without.piece(b[1]).front() != ' ');
    CHECK(without.encode("", true) == std::vector<int32_t>{1});
    CHECK(without.encode("", false).empty());
    // Without BOS the same holds: the prefix is the model's, not BOS's.
    CHECK(without.encode("Once upon a time", false) == std::vector<int32_t>(b.begin() + 1, b.end()));
    // The dummy prefix is exactly a space in front of the text, nothing more.
    CHECK(without.encode(" Once upon a time", true) == a);
    CHECK(without.encode(" upon", false) == with.encode("upon", false));
    // Without it, a leading space is the text's own, so decoding after BOS keeps it (only a dummy prefix is
    // dropped there).
    for (const std::string text : {"Once upon a time", " leading space", "  two", "x", "line\nbreak"}) {
        INFO(text);
        CHECK(decode_all(without, without.encode(text, true)) == text);
        CHECK(decode_all(with, with.encode(text, true)) == text);
    }
}

TEST_CASE("llama2.c tokenizer: byte fallback for what the vocabulary lacks", "[tokenizer]") {
    const Llama2cTokenizer tok(tok512, 512, 1);
    const std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80 ~\t{x}";
    const auto ids = tok.encode(text, true);
    CHECK(decode_all(tok, ids) == text);
    // Each byte of the emoji is its own <0xNN> piece.
    int byte_pieces = 0;
    for (int32_t id : ids) byte_pieces += tok.piece(id).rfind("<0x", 0) == 0;
    CHECK(byte_pieces >= 4);
    // Control bytes other than whitespace are never printed.
    const auto with_control = tok.encode(std::string("a\x01" "b", 3), false);
    CHECK(decode_all(tok, with_control) == " ab");
}

TEST_CASE("llama2.c tokenizer: round trips of varied text", "[tokenizer]") {
    const Llama2cTokenizer tok(tok512, 512, 1);
    for (const std::string text : {"Lily and Ben went to the park.", "  two  spaces", "line\nbreak\n\n", "123 + 456 = 579",
                                   "\"Quotes,\" she said; 'don't!'", "UPPER lower MiXeD", "x"}) {
        INFO(text);
        CHECK(decode_all(tok, tok.encode(text, true)) == text);
    }
}

TEST_CASE("whole pieces: the leftmost match, the longest there, bytes as bytes", "[tokenizer]") {
    WholePieces whole;
    whole.add("  ", 10);
    whole.add("   ", 11);
    whole.add("<b>", 12);
    whole.add("", 13);  // never matches
    whole.add("\xFF\xFE", 14);
    CHECK(whole.at("a   b", 0).id == -1);
    CHECK((whole.at("a   b", 1).id == 11 && whole.at("a   b", 1).length == 3));
    CHECK(whole.at("a   b", 2).id == 10);
    CHECK(whole.at("a   b", 3).id == -1);  // one space is no piece
    CHECK(whole.at("<b", 0).id == -1);       // a piece cut off by the text's end
    CHECK(whole.at("x\xFF\xFE", 1).id == 14);  // not UTF-8, still a piece
    CHECK(whole.at("abc", 7).id == -1);
}

TEST_CASE("llama2.c tokenizer: user-defined and control pieces are cut out whole", "[tokenizer]") {
    const Llama2cTokenizer plain(tok512, 512, 1);
    auto id_of = [&](const std::string& piece) {
        for (int32_t id = 0; id < plain.vocab_size(); ++id)
            if (plain.piece(id) == piece) return id;
        FAIL("no piece " << piece);
        return -1;
    };
    const int32_t ll = id_of("ll"), the = id_of(" the");
    const Llama2cTokenizer with_pieces(tok512, 512, 1, options(true, {ll}, {the}));
    // "ll" is one token wherever it stands; the runs around it merge on their own, each with the dummy
    // prefix (llama.cpp's rule: the first run and every run after a whole piece).
    auto joined = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    const std::vector<int32_t> want = joined(joined(plain.encode("he", true), {ll}), plain.encode("o", false));
    CHECK(with_pieces.encode("hello", true) == want);
    CHECK(with_pieces.encode_text("hello") == std::vector<int32_t>(want.begin() + 1, want.end()));
    // A control piece is cut out by encode (special tokens read) but is plain text to encode_text.
    const auto as_special = with_pieces.encode("in the end", false);
    CHECK(std::count(as_special.begin(), as_special.end(), the) == 1);
    CHECK(with_pieces.encode_text("in the end") == plain.encode("in the end", false));
    // Without any, nothing changes.
    CHECK(Llama2cTokenizer(tok512, 512, 1, {}).encode("hello there", true) == plain.encode("hello there", true));
    CHECK_THROWS_WITH(Llama2cTokenizer(tok512, 512, 1, options(true, {}, {512})),
                      Catch::Contains("control token id 512 is not one of its 512 pieces"));
}

TEST_CASE("llama2.c tokenizer: a file that does not fit is refused", "[tokenizer][errors]") {
    CHECK_THROWS_WITH(Llama2cTokenizer(tok512, 513, 1), Catch::Contains("has 512 pieces but the model's vocabulary has 513"));
    CHECK_THROWS_WITH(Llama2cTokenizer("/nonexistent/tok.bin", 512, 1), Catch::Contains("cannot open tokenizer"));
    const std::string cut = (std::filesystem::temp_directory_path() / "kvx_cut_tok.bin").string();
    {
        std::ifstream in(tok512, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 3));
    }
    CHECK_THROWS_WITH(Llama2cTokenizer(cut, 512, 1), Catch::Contains("at piece 511: truncated"));
    std::filesystem::remove(cut);
}
