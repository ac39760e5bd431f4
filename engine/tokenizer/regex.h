// Regular expressions for the tokenizers, on PCRE2 in UTF + UCP mode (Unicode properties for \p{L}, \w,
// case folding), JIT-compiled where the platform allows. HF tokenizers writes its patterns for Oniguruma;
// Regex::Syntax::Oniguruma adapts the one construct whose meaning differs (below).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace kvx {

class Regex {
public:
    enum class Syntax {
        Pcre2,
        // Oniguruma's \s and \S follow Unicode's White_Space property; PCRE2's also count U+180E (MONGOLIAN
        // VOWEL SEPARATOR, a format character since Unicode 6.3). They become \p{White_Space} and
        // \P{White_Space}, which work inside character classes too. Every other construct that tokenizer
        // patterns use means the same in both.
        Oniguruma,
        Literal,  // the pattern is a plain string
    };

    // Throws kvx::Error with PCRE2's message and the offset in the pattern where it stopped.
    Regex(std::string_view pattern, Syntax syntax);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // The leftmost match starting at or after `from`: sets [begin, end) and returns true, else false.
    // text must be valid UTF-8 (the tokenizer checks it once) and `from` a code point boundary.
    // Throws kvx::Error when PCRE2 gives up (its backtracking limits).
    bool find(std::string_view text, size_t from, size_t& begin, size_t& end) const;

    // Whether the code point belongs to the set this pattern describes (a one-character class).
    bool matches_char(char32_t code_point) const;

    const std::string& pattern() const { return pattern_; }

private:
    std::string pattern_;  // as PCRE2 compiled it, for messages
    pcre2_real_code_8* code_ = nullptr;
};

}  // namespace kvx
