// Added tokens (tokenizer.json's added_tokens): special tokens such as <|endoftext|> and extra vocabulary
// such as runs of spaces. They are cut out of the text before pre-tokenization, as HF tokenizers does:
//
//   1. tokens with normalized=false are found in the raw text;
//   2. tokens with normalized=true are found in what is left between them (after the normalizer, and kvx
//      reads tokenizers without one, so in the same text);
//   3. the rest goes on to the pre-tokenizer and BPE.
//
// In each pass the leftmost match wins, the longest of those starting there; matching resumes after it.
// single_word drops a match that touches a word character (Unicode \w: letters, marks, decimal digits,
// connector punctuation, ZWJ/ZWNJ); lstrip and rstrip make the token swallow the whitespace beside it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/regex.h"

namespace kvx {

struct AddedToken {
    int32_t id = -1;
    std::string content;
    bool special = false;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = true;
};

class AddedTokens {
public:
    using TextSink = std::function<void(std::string_view text)>;
    using TokenSink = std::function<void(int32_t id)>;

    explicit AddedTokens(const std::vector<AddedToken>& tokens);

    // Cuts `text` (valid UTF-8) into runs of ordinary text, passed to on_text (never empty), and added
    // tokens, passed to on_token, in text order.
    void split(std::string_view text, const TextSink& on_text, const TokenSink& on_token) const;

private:
    struct Pass {
        std::unique_ptr<Regex> any;  // every content of the pass, longest first; null when it has none
        std::unordered_map<std::string, AddedToken> by_content;
    };
    void split_pass(const Pass& pass, std::string_view text, const TextSink& on_text,
                    const TokenSink& on_token) const;

    Pass raw_;         // normalized=false
    Pass normalized_;  // normalized=true
    Regex word_char_;
    Regex white_space_;
};

}  // namespace kvx
