// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable code point, so that a
// BPE vocabulary over raw bytes can be stored as text. Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF)
// stand for themselves; the other 68 (controls, space, 0x7F..0xA0, 0xAD) take U+0100 upwards in byte order,
// which makes the space 'Ġ' (U+0120) and the newline 'Ċ' (U+010A).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvx::byte_level {

char32_t char_of_byte(uint8_t byte);

// The byte a code point stands for, or -1 when it is not in the alphabet.
int byte_of_char(char32_t code_point);

// The raw bytes of a vocabulary entry written in the alphabet; nullopt when one of its characters is not in
// it (then the entry means its own UTF-8 text, as HF's ByteLevel decoder treats it). `text` must be UTF-8.
std::optional<std::string> bytes_of_text(std::string_view text);

// Raw bytes written in the alphabet: how the entry for those bytes appears in a vocabulary file.
std::string text_of_bytes(std::string_view bytes);

}  // namespace kvx::byte_level
