#include "engine/tokenizer/tokenizer_llama2c_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/files/regular_file.h"
#include "kernels/error.h"

namespace kvx {
namespace {

// The longest piece a file may declare. SentencePiece cuts pieces at 16 code points (64 bytes of UTF-8) by
// default and Llama 2's tokenizer.bin has max_token_length 27; 1024 leaves room for long user-defined
// pieces while keeping a crafted length field from asking for gigabytes.
constexpr size_t kMaxPieceBytes = 1024;
// The most bytes read, whatever vocab_size says: vocab_size comes from the model's config, which a hostile
// model folder writes too. Llama 2's 32000 pieces take under 0.5 MiB; 64 MiB is harmless to allocate.
constexpr size_t kMaxFileBytes = size_t{64} << 20;

// The bytes of the file, read front to back; every read says first whether the bytes are there.
class Cursor {
public:
    explicit Cursor(const std::string& bytes) : bytes_(bytes) {}
    size_t left() const { return bytes_.size() - at_; }
    template <class T>
    T take() {  // caller checked left() >= sizeof(T)
        T value;
        std::memcpy(&value, bytes_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return value;
    }
    std::string take_string(size_t n) {  // caller checked left() >= n
        std::string s = bytes_.substr(at_, n);
        at_ += n;
        return s;
    }

private:
    const std::string& bytes_;
    size_t at_ = 0;
};

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

}  // namespace

int parse_byte_piece(std::string_view piece) {
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
    const int high = hex_digit(piece[3]);
    const int low = hex_digit(piece[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
}

Llama2cVocabulary read_llama2c_vocabulary(const std::string& path, int vocab_size) {
    const std::string name = "tokenizer '" + path + "'";
    if (vocab_size <= 0)
        throw Error(name + " cannot fit a model whose vocabulary size is " + std::to_string(vocab_size));
    // At most the header and vocab_size pieces of the longest length allowed.
    const size_t most = std::min(kMaxFileBytes, 4 + static_cast<size_t>(vocab_size) * (8 + kMaxPieceBytes));
    const std::string bytes = RegularFile(path, "tokenizer").read_all(most);
    Cursor in(bytes);

    if (in.left() < 4)
        throw Error(name + " is " + std::to_string(bytes.size()) + " bytes, too short for its max_token_length header");
    const auto max_token_length = in.take<int32_t>();
    if (max_token_length <= 0 || static_cast<size_t>(max_token_length) > kMaxPieceBytes)
        throw Error(name + " has max_token_length " + std::to_string(max_token_length) + ", outside 1.." +
                    std::to_string(kMaxPieceBytes));

    Llama2cVocabulary vocab;
    // Each piece takes at least 8 bytes, so a small file cannot make a large vocab_size reserve much.
    const size_t expected = std::min(static_cast<size_t>(vocab_size), in.left() / 8);
    vocab.pieces.reserve(expected);
    vocab.scores.reserve(expected);
    auto piece_error = [&](const std::string& what) {
        return Error(name + " at piece " + std::to_string(vocab.pieces.size()) + ": " + what);
    };
    while (in.left() > 0) {
        if (vocab.pieces.size() == static_cast<size_t>(vocab_size))
            throw Error(name + " has more pieces than the model's vocabulary has (" + std::to_string(vocab_size) + ")");
        if (in.left() < 8)
            throw piece_error("truncated, its score and length need 8 bytes, " + std::to_string(in.left()) + " are left");
        const auto score = in.take<float>();
        const auto length = in.take<int32_t>();
        // A NaN compares false against every score and would silently reorder the merges; an infinity wins
        // or loses every comparison. SentencePiece writes neither.
        if (!std::isfinite(score)) throw piece_error("score " + std::to_string(score) + " is not finite");
        if (length < 0 || length > max_token_length)
            throw piece_error("length " + std::to_string(length) + " is outside 0..max_token_length " +
                              std::to_string(max_token_length));
        if (static_cast<size_t>(length) > in.left())
            throw piece_error("truncated, its length is " + std::to_string(length) + " bytes, " +
                              std::to_string(in.left()) + " are left");
        vocab.pieces.push_back(in.take_string(static_cast<size_t>(length)));
        vocab.scores.push_back(score);
    }
    if (vocab.pieces.size() != static_cast<size_t>(vocab_size))
        throw Error(name + " has " + std::to_string(vocab.pieces.size()) + " pieces but the model's vocabulary has " +
                    std::to_string(vocab_size));
    return vocab;
}

}  // namespace kvx
