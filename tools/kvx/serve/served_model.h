// What the HTTP layer knows of the model it serves: its id in the API, its config and tokenizer, its chat
// template when it has one kvx can apply, and the limits requests are checked against.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/generation/chat_template.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx::serve {

struct ServedModel {
    std::string id;  // the model directory's name: what /v1/models lists and requests name
    const ModelConfig* config = nullptr;
    const Tokenizer* tokenizer = nullptr;
    std::optional<ChatTemplate> chat;  // empty: /v1/chat/completions answers 400, saying why
    std::string no_chat_reason;
    int32_t context = 0;
    int32_t max_seqs = 1;
};

}  // namespace kvx::serve
