// Pieces a SentencePiece tokenizer cuts out of the text whole before it merges anything: its user-defined
// pieces (Gemma's runs of spaces, tabs and newlines, HTML tags), always, and its control pieces
// (<start_of_turn>), when the text's special tokens are read as such. llama.cpp does the same
// (llama-vocab.cpp's special-token partition), which is what kvx's SentencePiece ids are checked against.
//
// Matching is leftmost, then longest: at each byte the longest piece starting there wins, and matching
// resumes after it. llama.cpp instead takes the longest piece anywhere in the text first; the two orders
// differ only where a piece's end overlaps another's start ("ab" + "bcd" over "abcd"), which no vocabulary
// kvx reads has (a test checks Gemma 3's). Bytes are compared as bytes, so a text need not be UTF-8.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvx {

class WholePieces {
public:
    // A piece and its token; an empty piece never matches and is ignored.
    void add(std::string_view piece, int32_t id);
    bool empty() const { return ids_.empty(); }

    struct Match {
        int32_t id = -1;  // -1: no piece starts here
        size_t length = 0;
    };
    // The longest piece that `text` holds at byte `at`.
    Match at(std::string_view text, size_t at) const;

private:
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
    // [first byte] the distinct lengths of the pieces starting with it, longest first: a match costs one
    // lookup per length (Gemma 3: at most 31), not one per piece (6,400 of them).
    std::array<std::vector<size_t>, 256> lengths_;
};

}  // namespace kvx
