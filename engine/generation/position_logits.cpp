#include "engine/generation/position_logits.h"

#include <algorithm>

#include "engine/runtime/sequence_guard.h"
#include "kernels/error.h"

namespace kvx {

std::vector<float> position_logits(Engine& engine, const std::vector<int32_t>& tokens, size_t n_prefill) {
    if (n_prefill == 0 || n_prefill > tokens.size())
        throw Error("the prefill must cover 1 to " + std::to_string(tokens.size()) + " tokens, not " +
                    std::to_string(n_prefill));
    const size_t vocab = static_cast<size_t>(engine.vocab_size());
    std::vector<float> all(tokens.size() * vocab);  // [tokens][vocab]
    const SequenceGuard seq(engine);
    const std::span<const int32_t> span(tokens);
    const auto& prefill = engine.forward({{seq.id(), span.first(n_prefill), true}});
    std::copy(prefill.begin(), prefill.end(), all.begin());
    for (size_t i = n_prefill; i < tokens.size(); ++i) {
        const auto& step = engine.forward({{seq.id(), span.subspan(i, 1), false}});
        std::copy(step.begin(), step.end(), all.begin() + static_cast<std::ptrdiff_t>(i * vocab));
    }
    return all;
}

}  // namespace kvx
