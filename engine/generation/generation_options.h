// What a generation call is asked to do and what it reports: shared by the plain decoding loop
// (generator.h) and its speculative variant (speculative.h), which each take and fill them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/cache/kv_cache_usage.h"
#include "engine/generation/prompt_lookup.h"
#include "engine/generation/speculative_stats.h"

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
                                        // pass (1..kMaxSpeculativeDrafts; speculative.h)
    int32_t lookup_ngram = kDefaultLookupNgram;  // longest n-gram prompt lookup matches (1..kMaxLookupNgram)
};

}  // namespace kvx
