// UTF-8 for the tokenizers: one validation pass over the text (after which PCRE2 is told to skip its own
// check on every match), stepping over code points of text already validated, and encoding.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvx {

// Offset of the first byte that does not begin a valid UTF-8 sequence (truncated sequences, overlong forms,
// surrogates and values past U+10FFFF included), or text.size() when the whole text is valid.
size_t utf8_invalid_at(std::string_view text);

// The length in bytes of the UTF-8 sequence that starts with lead: 2, 3 or 4 for a lead byte, 1 for ASCII and
// for any byte below 0xC0 (a continuation byte is no lead, so it stands alone). It does not validate what
// follows: utf8_invalid_at does.
inline size_t utf8_sequence_length(unsigned char lead) {
    return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

// The code point starting at text[pos], moving pos past it. text must be valid UTF-8 and pos a boundary.
char32_t utf8_next(std::string_view text, size_t& pos);

// The code point ending at text[pos - 1], moving pos back to its first byte. Same preconditions, pos > 0.
char32_t utf8_prev(std::string_view text, size_t& pos);

void utf8_append(std::string& out, char32_t code_point);

}  // namespace kvx
