// The llama2.c tokenizer (tok512.bin and friends): a SentencePiece-style BPE vocabulary with one score per
// piece, merged greedily by score, with byte-fallback pieces <0x00>..<0xFF>. The file and the rules its
// reader follows are in tokenizer_llama2c_file.h; a GGUF file's "llama" vocabulary (gguf_tokenizer.h) gives
// the same pieces and scores from memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_llama2c_file.h"
#include "engine/tokenizer/whole_pieces.h"

namespace kvx {

// What a SentencePiece model says beside its pieces and scores, which tokenizer.bin cannot hold (config.json's
// tokenizer entry, from the GGUF's token types).
struct SentencePieceOptions {
    bool add_dummy_prefix = true;           // a space before the text (SentencePiece's name; Gemma's is false)
    std::vector<int32_t> user_defined_ids;  // pieces always cut out of the text whole (whole_pieces.h)
    std::vector<int32_t> control_ids;       // pieces cut out whole where special tokens are read (encode)
    bool add_bos = true;                    // encode(text, true) puts BOS first (GGUF's add_bos_token)
};

class Llama2cTokenizer final : public Tokenizer {
public:
    // Throws kvx::Error if the file is missing, not a regular file, too large, truncated, corrupt (a length
    // out of range, a non-finite score), or holds a number of pieces other than vocab_size (a tokenizer
    // that does not fit the model), or when an id of `options` is not one of its pieces.
    Llama2cTokenizer(const std::string& path, int vocab_size, int bos_id, SentencePieceOptions options = {});
    // From pieces already read and checked (spaces as ' ', not SentencePiece's U+2581; finite scores). `source`
    // starts every message ("tokenizer 'PATH'"). Throws kvx::Error when bos_id (unless -1) or an id of `options`
    // is not one of the pieces.
    Llama2cTokenizer(Llama2cVocabulary vocab, int bos_id, SentencePieceOptions options, const std::string& source);

    // Prepends BOS when asked, then cuts the text at its user-defined and control pieces (whole_pieces.h),
    // each one token. Each run of text between them gets SentencePiece's dummy-prefix space first when the
    // model asks for one (as llama.cpp does: the first run and every run after a whole piece; BOS does not
    // count), then the adjacent pair whose union scores highest merges, the leftmost among equals, until no
    // pair is a piece: O(n log n) in the text's length.
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
    // The same with control pieces read as their characters: user text that cannot forge a turn marker.
    std::vector<int32_t> encode_text(std::string_view text) const override;

    // The bytes token `token` stands for, given the token before it: BOS is nothing, the leading space of
    // a piece right after BOS is dropped when it is the dummy prefix (add_dummy_prefix), byte pieces become their byte. Control bytes other than whitespace become
    // nothing, so a stray byte never garbles a terminal; bytes >= 0x80 pass through to form UTF-8.
    std::string decode(int32_t prev_token, int32_t token) const override;

    int vocab_size() const { return static_cast<int>(pieces_.size()); }
    const std::string& piece(int32_t token) const { return pieces_.at(static_cast<size_t>(token)); }

private:
    int32_t lookup(std::string_view piece) const;  // -1 when the piece is not in the vocabulary
    std::vector<int32_t> encode_with(const WholePieces& whole, std::string_view text, bool add_bos) const;
    // A run of text between whole pieces, merged, appended to `out`.
    void encode_run(std::string_view run, std::vector<int32_t>& out) const;
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
    WholePieces user_defined_;           // cut out by encode_text
    WholePieces user_defined_and_control_;  // cut out by encode
    int bos_id_;
    bool add_bos_;
    bool add_dummy_prefix_;
};

}  // namespace kvx
