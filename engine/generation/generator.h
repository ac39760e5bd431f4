// The generation loop: prefill new tokens in one pass, then decode one token per step, streaming text.
// generate() runs a fresh sequence from a prompt; continue_sequence() extends a live one (a chat turn
// appends only its new tokens to the conversation's cache).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/generation/generation_options.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx {

// Runs one sequence to completion and frees it. `emit` receives the text of every prompt and generated
// token as it arrives. Throws kvx::Error before any work when the prompt is empty, or when the prompt
// and max_new_tokens do not fit the engine's context.
GenerationStats generate(Engine& engine, const Tokenizer& tokenizer, Sampler& sampler,
                         const std::vector<int32_t>& prompt, const GenerationOptions& options,
                         const std::function<void(std::string_view)>& emit);

// Appends new_tokens to the live sequence `seq` in one forward pass, then samples and appends up to
// max_new_tokens tokens (-1: until a stop token or the context is full). `emit` receives only the
// generated text; `generated` (if not null) the sampled tokens. The sequence stays alive. Throws kvx::Error
// with nothing changed when new_tokens is empty or does not fit the context.
GenerationStats continue_sequence(Engine& engine, SeqId seq, const Tokenizer& tokenizer, Sampler& sampler,
                                  std::span<const int32_t> new_tokens, const GenerationOptions& options,
                                  const std::function<void(std::string_view)>& emit,
                                  std::vector<int32_t>* generated = nullptr);

}  // namespace kvx
