// The llama2.c tokenizer (tok512.bin and friends): a SentencePiece-style BPE vocabulary with one score per
// piece, merged greedily by score, with byte-fallback pieces <0x00>..<0xFF>. The file and the rules its
// reader follows are in tokenizer_llama2c_file.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvx {

class Llama2cTokenizer {
public:
    // Throws kvx::Error if the file is missing, not a regular file, too large, truncated, corrupt (a length
    // out of range, a non-finite score), or holds a number of pieces other than vocab_size (a tokenizer
    // that does not fit the model). add_dummy_prefix: SentencePiece's add_dummy_prefix, a fact of the model
    // (config.json's tokenizer.add_dummy_prefix; Gemma's is false).
    Llama2cTokenizer(const std::string& path, int vocab_size, int bos_id, bool add_dummy_prefix = true);

    // Prepends BOS when asked; a non-empty text gets SentencePiece's dummy-prefix space first when the model
    // asks for one (after BOS, as llama.cpp does: BOS does not change whether it is added). Then the
    // adjacent pair whose union scores highest merges, the leftmost among equals, until no pair is a piece:
    // O(n log n) in the text's length.
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const;

    // The bytes token `token` stands for, given the token before it: BOS is nothing, the leading space of
    // a piece right after BOS is dropped when it is the dummy prefix (add_dummy_prefix), byte pieces become their byte. Control bytes other than whitespace become
    // nothing, so a stray byte never garbles a terminal; bytes >= 0x80 pass through to form UTF-8.
    std::string decode(int32_t prev_token, int32_t token) const;

    int vocab_size() const { return static_cast<int>(pieces_.size()); }
    const std::string& piece(int32_t token) const { return pieces_.at(static_cast<size_t>(token)); }

private:
    int32_t lookup(std::string_view piece) const;  // -1 when the piece is not in the vocabulary
    std::vector<int32_t> split(std::string_view text) const;  // the tokens before any merge
    void merge(std::vector<int32_t>& tokens) const;

    // Looked up by string_view (transparent hash), so probing a candidate merge allocates nothing.
    struct PieceHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };

    std::vector<std::string> pieces_;  // [vocab_size]
    std::vector<float> scores_;        // [vocab_size] merge priority, higher first; finite
    size_t max_piece_bytes_ = 0;       // the longest piece: a longer pair cannot merge
    std::unordered_map<std::string, int32_t, PieceHash, std::equal_to<>> ids_;  // piece -> lowest id holding it
    int32_t byte_ids_[256];            // [byte] id of <0xNN>, or -1
    int bos_id_;
    bool add_dummy_prefix_;
};

}  // namespace kvx
