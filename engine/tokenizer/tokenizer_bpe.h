// A byte-level BPE tokenizer (GPT-2 style), built to encode exactly as HF tokenizers does:
//
//   text ─ AddedTokens ─┬─ added token ─────────────────────────────▶ its id
//   (UTF-8)             └─ other text ─ PreTokenizer ─ words ─ BpeModel ─▶ ids
//
// preceded, when add_bos is asked for, by what the tokenizer's post-processor puts before a text.
// Decoding maps a token back to its bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/bpe_added_tokens.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/bpe_pretokenizer.h"
#include "engine/tokenizer/bpe_spec.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx {

class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(const BpeTokenizerSpec& spec);  // throws kvx::Error for inconsistent tables

    // add_bos: the post-processor's tokens before the text (HF's add_special_tokens=True, minus anything
    // it would append after the text). Throws kvx::Error for text that is not valid UTF-8.
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
    // Special added tokens stay text; the other added tokens (runs of spaces, extra words) are still cut out.
    std::vector<int32_t> encode_text(std::string_view text) const override;

    // The bytes `token` stands for; prev_token does not matter for byte-level BPE. A token may end inside a
    // UTF-8 character that the next token completes. Ids that no token has decode to nothing, as in HF.
    std::string decode(int32_t prev_token, int32_t token) const override;

    size_t n_tokens() const { return n_tokens_; }                          // distinct ids in use
    int32_t max_id() const { return static_cast<int32_t>(token_bytes_.size()) - 1; }
    const std::string& source() const { return source_; }

private:
    std::vector<int32_t> encode_with(const AddedTokens& added, std::string_view text, bool add_bos) const;

    std::string source_;
    BpeModel model_;
    PreTokenizer pre_tokenizer_;
    AddedTokens added_tokens_;
    AddedTokens plain_added_tokens_;  // the non-special ones, for encode_text
    std::vector<int32_t> prefix_ids_;
    std::vector<std::string> token_bytes_;  // [max id + 1] what each id decodes to
    size_t n_tokens_ = 0;
};

}  // namespace kvx
