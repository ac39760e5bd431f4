// The llama2.c tokenizer's reader against hostile files (the cases a fuzzer found, and their neighbours):
// each is refused with one kvx::Error line naming the file and what is wrong, before anything is allocated
// for a length the file claims; a piece that only looks like a byte piece is an ordinary piece.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <sys/stat.h>

#include "engine/tokenizer/tokenizer_llama2c.h"
#include "kernels/error.h"
#include "tokenizer_llama2c_support.h"

using namespace kvx;
using kvx::test::Llama2cFile;
using kvx::test::TempFile;
using kvx::test::tok512_path;

namespace {

// The message of the kvx::Error loading `path` throws, or "" when it loads. Any other exception (a
// std::bad_alloc from trusting a length) escapes and fails the test.
std::string load_error(const std::string& path, int vocab_size) {
    try {
        Llama2cTokenizer(path, vocab_size, 1);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// Checks that loading fails with one line that names the file and contains `why`.
void check_refused(const std::string& path, int vocab_size, const std::string& why) {
    const std::string message = load_error(path, vocab_size);
    INFO(message);
    CHECK(message.find(why) != std::string::npos);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
}

// A header and then one piece's score and length, with `bytes_after` bytes where the piece would be.
std::string one_piece(int32_t max_token_length, int32_t length, size_t bytes_after) {
    std::string out(reinterpret_cast<const char*>(&max_token_length), 4);
    const float score = 0;
    out.append(reinterpret_cast<const char*>(&score), 4);
    out.append(reinterpret_cast<const char*>(&length), 4);
    out.append(bytes_after, 'x');
    return out;
}

}  // namespace

TEST_CASE("llama2.c tokenizer file: a byte piece is exactly <0x, two hex digits and >", "[tokenizer][errors]") {
    // sscanf("<0x%02X>") read "<0x-3>" as 4294967293, an index far past the 256 byte ids, and took a sign,
    // a space or any sixth character.
    Llama2cFile f = Llama2cFile::read(tok512_path);
    REQUIRE(f.pieces[3] == "<0x00>");
    const std::vector<std::string> lookalikes = {"<0x-3>", "<0x+4>", "<0x 5>", "<0x41x", "<0xG1>", "<0X41>"};
    for (size_t i = 0; i < lookalikes.size(); ++i) f.pieces[3 + i] = lookalikes[i];  // <0x00>..<0x05>
    const TempFile file("tok_lookalikes.bin", f.bytes());
    const Llama2cTokenizer tok(file.path(), 512, 1);
    for (size_t i = 0; i < lookalikes.size(); ++i) {
        INFO(lookalikes[i]);
        CHECK(tok.decode(0, static_cast<int32_t>(3 + i)) == lookalikes[i]);  // text, not a byte
    }
    CHECK(tok.decode(0, 3 + 0x41) == "A");  // the real <0x41> still is one
    // Bytes 0x00..0x05 lost their pieces: nothing else may stand in for them.
    CHECK_THROWS_WITH(tok.encode(std::string("\x01", 1), false), Catch::Contains("cannot encode byte 1"));
}

TEST_CASE("llama2.c tokenizer file: lengths are checked before they are used", "[tokenizer][errors]") {
    constexpr int32_t huge = std::numeric_limits<int32_t>::max();
    {   // A max_token_length and a piece length of 2 GB: the reader allocated the piece before reading it.
        const TempFile file("tok_huge_piece.bin", one_piece(huge, huge - 15, 16));
        check_refused(file.path(), 512, "max_token_length 2147483647, outside 1..1024");
    }
    {
        const TempFile file("tok_long_piece.bin", one_piece(16, huge - 15, 16));
        check_refused(file.path(), 512, "at piece 0: length 2147483632 is outside 0..max_token_length 16");
    }
    {
        const TempFile file("tok_negative_piece.bin", one_piece(16, -5, 16));
        check_refused(file.path(), 512, "at piece 0: length -5 is outside 0..max_token_length 16");
    }
    {
        const TempFile file("tok_past_end.bin", one_piece(64, 60, 10));
        check_refused(file.path(), 512, "at piece 0: truncated, its length is 60 bytes, 10 are left");
    }
    {
        const TempFile file("tok_no_header.bin", "ab");
        check_refused(file.path(), 512, "is 2 bytes, too short for its max_token_length header");
    }
    {   // tok512.bin cut inside its last piece's length: 5 of the 8 bytes are left.
        const std::string bytes = kvx::test::file_bytes(tok512_path);
        const size_t last_piece = Llama2cFile::read(tok512_path).pieces.back().size();
        const TempFile file("tok_cut_score.bin", bytes.substr(0, bytes.size() - last_piece - 3));
        check_refused(file.path(), 512, "at piece 511: truncated, its score and length need 8 bytes");
    }
}

TEST_CASE("llama2.c tokenizer file: no more is read than the vocabulary needs", "[tokenizer][errors]") {
    // tok512.bin and 1 MiB of zeros, read as 131072 empty pieces: the size alone refuses it.
    const TempFile padded("tok_padded.bin", kvx::test::file_bytes(tok512_path) + std::string(size_t{1} << 20, '\0'));
    check_refused(padded.path(), 512, "a tokenizer may have");
    // One piece too many stops the reading there.
    check_refused(tok512_path, 511, "has more pieces than the model's vocabulary has (511)");
    // A vocabulary size the file cannot have reserves nothing for it.
    check_refused(tok512_path, std::numeric_limits<int>::max(), "has 512 pieces but the model's vocabulary has 2147483647");
    check_refused(tok512_path, 0, "vocabulary size is 0");
}

TEST_CASE("llama2.c tokenizer file: a score that is not finite is refused", "[tokenizer][errors]") {
    // A NaN compares false with every score, which reordered the merges without a word.
    for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
        Llama2cFile f = Llama2cFile::read(tok512_path);
        f.scores[300] = bad;
        const TempFile file("tok_bad_score.bin", f.bytes());
        check_refused(file.path(), 512, "at piece 300: score ");
        check_refused(file.path(), 512, " is not finite");
    }
}

TEST_CASE("llama2.c tokenizer file: only a regular file is read", "[tokenizer][errors]") {
    // Opening a FIFO for reading blocked until a writer came.
    const std::string fifo = (std::filesystem::temp_directory_path() / ("kvx_test_" + std::to_string(::getpid()) + "_tok_fifo")).string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    check_refused(fifo, 512, "is not a regular file");
    std::filesystem::remove(fifo);
    check_refused(std::filesystem::temp_directory_path().string(), 512, "is a directory");
}
