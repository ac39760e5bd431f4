// The generation loop: prefill the prompt in one pass, then decode one token per step, streaming text.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

namespace kvx {

struct GenerationStats {
    int32_t prompt_tokens = 0;
    double prefill_seconds = 0;   // the prompt's forward pass
    int32_t generated_tokens = 0; // sampled tokens, stop token excluded
    int32_t decode_steps = 0;     // single-token forward passes after the prefill
    double decode_seconds = 0;
    int32_t kv_blocks_used = 0;
    int32_t kv_blocks_total = 0;
    size_t kv_bytes_used = 0;
    size_t kv_bytes_total = 0;
};

struct GenerationOptions {
    int32_t max_new_tokens = 256;     // -1 = until a stop token or the context is full
    std::vector<int> stop_token_ids;  // generation ends, silently, at any of them
};

// Runs one sequence to completion and frees it. `emit` receives the text of every prompt and generated
// token as it arrives. Throws kvx::Error before any work when the prompt is empty, or when the prompt
// and max_new_tokens do not fit the engine's context.
GenerationStats generate(Engine& engine, const Tokenizer& tokenizer, Sampler& sampler,
                         const std::vector<int32_t>& prompt, const GenerationOptions& options,
                         const std::function<void(std::string_view)>& emit);

}  // namespace kvx
