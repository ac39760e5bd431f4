#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/utf8.h"

namespace kvx::byte_level {
namespace {

struct Alphabet {
    std::array<char32_t, 256> char_of{};  // [byte] -> code point
    std::array<int16_t, 324> byte_of{};   // [code point < 324] -> byte, or -1; the alphabet ends at U+0143

    Alphabet() {
        byte_of.fill(-1);
        char32_t next_extra = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            char_of[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next_extra++;
            byte_of[char_of[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
        }
    }
};

const Alphabet& alphabet() {
    static const Alphabet a;
    return a;
}

}  // namespace

char32_t char_of_byte(uint8_t byte) { return alphabet().char_of[byte]; }

int byte_of_char(char32_t code_point) {
    return code_point < alphabet().byte_of.size() ? alphabet().byte_of[code_point] : -1;
}

std::optional<std::string> bytes_of_text(std::string_view text) {
    std::string bytes;
    bytes.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        const int b = byte_of_char(utf8_next(text, pos));
        if (b < 0) return std::nullopt;
        bytes += static_cast<char>(b);
    }
    return bytes;
}

std::string text_of_bytes(std::string_view bytes) {
    std::string text;
    text.reserve(bytes.size() * 2);
    for (char c : bytes) utf8_append(text, char_of_byte(static_cast<uint8_t>(c)));
    return text;
}

}  // namespace kvx::byte_level
