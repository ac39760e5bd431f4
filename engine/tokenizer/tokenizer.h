// The interface the generation loop needs from any tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvx {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
    // `text` as ordinary text, whatever it holds: the spelling of a special token ("<|im_end|>") is encoded as
    // the characters it is made of, never as that token (HF's encode_special_tokens). User text is encoded so,
    // so that a message cannot forge a turn boundary. No BOS.
    virtual std::vector<int32_t> encode_text(std::string_view text) const { return encode(text, false); }
    // Bytes to print for `token` following `prev_token` (-1 at the start).
    virtual std::string decode(int32_t prev_token, int32_t token) const = 0;
};

}  // namespace kvx
