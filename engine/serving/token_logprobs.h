// Log-probabilities of a row of logits for the OpenAI API's logprobs: the sampled token's and the k most
// likely, from the log-softmax of the raw logits (what vLLM and llama.cpp's server report by default).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/serving/serve_request.h"

namespace kvx {

// logits [vocab_size]. Fills token.logprob and token.top (k entries, best first; ties to the lower id),
// leaving the alternatives' pieces for the caller, who has the tokenizer.
void fill_logprobs(const float* logits, int32_t vocab_size, int32_t k, SampledToken& token);

}  // namespace kvx
