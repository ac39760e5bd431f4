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
    // Bytes to print for `token` following `prev_token` (-1 at the start).
    virtual std::string decode(int32_t prev_token, int32_t token) const = 0;
};

}  // namespace kvx
