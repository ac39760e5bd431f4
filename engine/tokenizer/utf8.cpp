#include "engine/tokenizer/utf8.h"

namespace kvx {
namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

size_t utf8_invalid_at(std::string_view text) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const unsigned char c = s[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len = 0;
        char32_t cp = 0, min = 0;
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1Fu, min = 0x80;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0Fu, min = 0x800;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07u, min = 0x10000;
        else return i;  // a continuation byte where a sequence should start, or 0xF8..0xFF
        if (i + len > n) return i;
        for (size_t k = 1; k < len; ++k) {
            if (!is_continuation(s[i + k])) return i;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return n;
}

char32_t utf8_next(std::string_view text, size_t& pos) {
    const auto c = static_cast<unsigned char>(text[pos++]);
    if (c < 0x80) return c;
    const int extra = static_cast<int>(utf8_sequence_length(c)) - 1;
    char32_t cp = c & (0x3Fu >> extra);
    for (int k = 0; k < extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[pos++]) & 0x3Fu);
    return cp;
}

char32_t utf8_prev(std::string_view text, size_t& pos) {
    do --pos;
    while (pos > 0 && is_continuation(static_cast<unsigned char>(text[pos])));
    size_t at = pos;
    return utf8_next(text, at);
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

}  // namespace kvx
