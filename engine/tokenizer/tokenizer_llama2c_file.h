// Reading a llama2.c tokenizer file (tokenizer.bin, tok512.bin) as a hostile input: every length in it is
// checked against the bytes that are really there before it is used, so a corrupt or crafted file costs at
// most its own size in memory and ends in one kvx::Error line naming the file.
//
// File layout (native byte order, as llama2.c's tokenizer.py writes it):
//   int32 max_token_length
//   vocab_size times: float score, int32 byte length, the piece's bytes (no terminator)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvx {

struct Llama2cVocabulary {
    std::vector<std::string> pieces;  // [vocab_size]
    std::vector<float> scores;        // [vocab_size] merge priority, higher first; all finite
};

// The pieces and scores of the file at `path`, which must hold exactly `vocab_size` pieces. Throws kvx::Error
// when the file is not a regular file, is larger than a tokenizer of that vocabulary can be, is truncated,
// has a length out of range, a non-finite score, or a number of pieces other than vocab_size.
Llama2cVocabulary read_llama2c_vocabulary(const std::string& path, int vocab_size);

// The byte a byte-fallback piece stands for: 0..255 for exactly "<0x" + two hex digits + ">", else -1.
int parse_byte_piece(std::string_view piece);

}  // namespace kvx
