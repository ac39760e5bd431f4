// Perplexity of a model over a text, by llama.cpp's method (its llama-perplexity tool), so the two engines'
// figures compare: the text's tokens are cut into chunks of `context` tokens (a short tail is dropped); each
// chunk runs from an empty cache, its first token replaced by BOS where the tokenizer puts one before a text;
// the second half of each chunk is scored: the logits at positions context/2 .. context-2 against the tokens
// that follow them. Perplexity = exp(mean negative log-likelihood), the NLL of each token taken from a
// log-softmax computed in double.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/runtime/engine.h"

namespace kvx {

// -log softmax(logits)[target], in double.
double token_nll(std::span<const float> logits, int32_t target);

struct PerplexityResult {
    double nll_sum = 0;   // over every scored token
    size_t scored = 0;    // tokens scored: chunks x (context - 1 - context / 2)
    size_t chunks = 0;
    double perplexity() const;
};

// Called after each chunk with the running result (kvx perplexity prints llama.cpp's "[i]ppl" progress).
using PerplexityProgress = std::function<void(const PerplexityResult&)>;

// tokens: the whole text's tokens (with the tokenizer's BOS in front where it puts one); bos: the token each
// chunk starts with instead of its own, or -1 for none. Throws kvx::Error when context < 4 or the text has
// fewer than 2 x context tokens (llama.cpp's minimum), or the engine refuses a chunk.
PerplexityResult chunked_perplexity(Engine& engine, const std::vector<int32_t>& tokens, int32_t context,
                                    int32_t bos, const PerplexityProgress& progress = {});

}  // namespace kvx
