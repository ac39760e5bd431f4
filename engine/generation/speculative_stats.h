// What speculative decoding did in one generation (GenerationStats::speculative).
#pragma once

#include <cstdint>

namespace kvx {

struct SpeculativeStats {
    int32_t drafted_tokens = 0;   // draft tokens fed to forward passes
    int32_t accepted_tokens = 0;  // drafts equal to the token sampled at their position, kept in the cache
    int32_t forward_passes = 0;   // decode passes, each [last token, drafts...]
    int32_t decoded_tokens = 0;   // tokens sampled from those passes' logits (stop token excluded)

    double acceptance_rate() const { return drafted_tokens > 0 ? double(accepted_tokens) / drafted_tokens : 0.0; }
    double tokens_per_pass() const { return forward_passes > 0 ? double(decoded_tokens) / forward_passes : 0.0; }
};

}  // namespace kvx
