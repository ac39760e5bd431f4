// The BPE model of a byte-level tokenizer: a word (raw bytes, from the pre-tokenizer) starts as one symbol
// per byte, then the adjacent pair with the lowest merge rank is merged, leftmost first among equals, until
// no adjacent pair has a merge. A min-heap of candidate merges keeps this O(n log n) in the word length n;
// entries made stale by earlier merges are recognised and skipped when they surface. Results are cached per
// word, since text repeats its words.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvx {

struct BpeModelSpec {
    std::vector<std::pair<std::string, int32_t>> vocab;        // token text (byte-level alphabet) -> id
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order, texts in the alphabet
    std::string unk_token;      // empty: a byte without a symbol is dropped, as HF does without unk_token
    bool fuse_unk = false;      // consecutive unknown bytes become one unk
    bool byte_fallback = false; // a byte without a symbol becomes <0xNN> pieces first, if the vocabulary has them
    bool ignore_merges = false; // a word that is itself in the vocabulary is one token, merges or not
};

class BpeModel {
public:
    // Throws kvx::Error (prefixed with `source`) for a merge whose parts or result are not in the vocabulary,
    // or an unk_token that is not.
    BpeModel(const BpeModelSpec& spec, const std::string& source);

    // Appends the ids of `word` (raw bytes, not empty) to `out`.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

private:
    struct Merge {
        uint32_t rank;
        int32_t merged_id;
    };
    // The symbols a byte starts as: its alphabet character's id, or its <0xNN> byte-fallback ids, or none
    // (then it is unknown).
    struct Start {
        std::vector<int32_t> ids;
    };

    void merge(std::vector<int32_t>& symbols) const;
    const Merge* find_merge(int32_t left, int32_t right) const;

    std::unordered_map<uint64_t, Merge> merges_;         // (left id << 32) | right id
    std::unordered_map<std::string, int32_t> raw_vocab_;  // raw bytes -> id, for ignore_merges
    std::array<Start, 256> start_;                        // [byte]
    int32_t unk_id_ = -1;
    bool fuse_unk_ = false;
    bool ignore_merges_ = false;

    // Words seen before -> their ids. Guarded: encode() is const and may run on several threads. Looked
    // up by string_view (transparent hash), so a hit allocates nothing. When full it starts again empty,
    // so that it follows what the text is about now.
    struct WordHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    static constexpr size_t kCacheCapacity = 65536;  // words
    static constexpr size_t kCacheMaxWord = 256;     // bytes; longer words are rare and not worth keeping
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>, WordHash, std::equal_to<>> cache_;
};

}  // namespace kvx
