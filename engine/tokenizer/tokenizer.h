// The interface the generation loop needs from any tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"

namespace kvx {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
    // Bytes to print for `token` following `prev_token` (-1 at the start).
    virtual std::string decode(int32_t prev_token, int32_t token) const = 0;
};

// The tokenizer named in the model's config; throws kvx::Error when the model has none or it does not fit.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir, const ModelConfig& config);

}  // namespace kvx
