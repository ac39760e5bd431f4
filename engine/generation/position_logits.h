// The logits of every position of a token sequence, computed the way generation computes them: the first
// n_prefill tokens in one prefill pass, every later token in a decode step of its own. `kvx logits` and the
// tests against ONNX Runtime use it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/runtime/engine.h"

namespace kvx {

// Returns [tokens.size()][vocab_size]. Uses a new sequence of the engine and frees it afterwards. Throws
// kvx::Error if n_prefill is 0 or beyond the tokens, or the engine refuses a step.
std::vector<float> position_logits(Engine& engine, const std::vector<int32_t>& tokens, size_t n_prefill);

}  // namespace kvx
