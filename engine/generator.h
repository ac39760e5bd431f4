// The generation loop: prefill new tokens in one pass, then decode one token per step, streaming text.
// generate() runs a fresh sequence from a prompt; continue_sequence() extends a live one (a chat turn
// appends only its new tokens to the conversation's cache).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/prompt_lookup.h"
#include "engine/sampler.h"
#include "engine/speculative_stats.h"
#include "engine/tokenizer.h"

namespace kvx {

struct GenerationStats {
    int32_t prompt_tokens = 0;    // tokens prefilled by this call (a chat turn: only the turn's new ones)
    int32_t cached_tokens = 0;    // tokens already in the sequence's cache before the call, not recomputed
    double prefill_seconds = 0;   // the prompt's forward pass
    int32_t generated_tokens = 0; // sampled tokens, stop token excluded
    int32_t decode_steps = 0;     // forward passes after the prefill (single-token unless speculative)
    double decode_seconds = 0;
    bool stopped_by_token = false;  // ended at a stop token (else: the token limit, the context, or interrupted)
    bool interrupted = false;       // ended by GenerationOptions::interrupted
    int32_t unappended_token = -1;  // the last generated token when the token limit ended the loop before
                                    // it was appended (its forward pass was not needed), else -1
    KvCacheUsage kv_usage;          // the pool when the call ended, before generate() frees the sequence
    std::vector<KvCacheUsage> kv_groups;  // per layer group (Engine::cache_groups()); kv_usage is group 0's
    SpeculativeStats speculative;  // all zero unless GenerationOptions::speculative_drafts > 0
};

struct GenerationOptions {
    int32_t max_new_tokens = 256;     // -1 = until a stop token or the context is full
    std::vector<int> stop_token_ids;  // generation ends, silently, at any of them; the stop token is not
                                      // appended to the sequence
    std::function<bool()> interrupted;  // polled before each sampled token (Ctrl-C); may be empty
    int32_t speculative_drafts = 0;     // 0 = plain decoding, else up to this many prompt-lookup drafts per
                                        // pass (1..kMaxSpeculativeDrafts; engine/speculative.h)
    int32_t lookup_ngram = kDefaultLookupNgram;  // longest n-gram prompt lookup matches (1..kMaxLookupNgram)
};

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
