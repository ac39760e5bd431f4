// What one client asks a server for, and what the server sends back, in engine terms (token ids, options,
// finish reasons): tools/kvx/serve/ translates the OpenAI API's JSON to and from these.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/sampler.h"

namespace kvx {

struct ServeRequest {
    std::vector<int32_t> prompt;          // never empty
    SamplerOptions sampling;              // choice i draws from seed + i
    int32_t max_tokens = 16;              // per choice; prompt + max_tokens fits the context
    int32_t n = 1;                        // choices; 2.. fork the prompt's sequence (its blocks are shared)
    std::vector<std::string> stop;        // text that ends a choice, cut from its text
    std::vector<int32_t> stop_token_ids;  // tokens that end a choice, neither appended nor shown
    int32_t top_logprobs = -1;            // -1: no log-probabilities; k >= 0: the sampled token's and the k best
};

enum class FinishReason { none, stop, length, abort };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort"; null for none

struct TokenLogprob {
    int32_t token;
    float logprob;      // log-softmax of the model's logits (before temperature and filters)
    std::string piece;  // its text, as decoded after the previous token
};

// One sampled token of a choice.
struct SampledToken {
    int32_t token;
    std::string piece;              // its text, as decoded after the previous token
    float logprob = 0;              // when logprobs were asked for
    std::vector<TokenLogprob> top;  // [top_logprobs] best first
};

// What a step produced for one choice: the text now safe to show (text that could be the start of a stop
// string waits until it is not), the tokens sampled, and, on its last event, why it ended.
struct ChoiceDelta {
    int32_t choice = 0;
    std::string text;
    std::vector<SampledToken> tokens;
    FinishReason finish = FinishReason::none;
};

struct ServeUsage {
    int32_t prompt_tokens = 0;
    int32_t cached_tokens = 0;      // of the prompt, taken from blocks other requests left in the cache
    int32_t completion_tokens = 0;  // every choice's, stop tokens excluded
};

}  // namespace kvx
