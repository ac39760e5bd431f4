#include "engine/generation/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/runtime/sequence_guard.h"
#include "kernels/error.h"

namespace kvx {

double token_nll(std::span<const float> logits, int32_t target) {
    if (target < 0 || static_cast<size_t>(target) >= logits.size())
        throw Error("token " + std::to_string(target) + " is outside the vocabulary of " +
                    std::to_string(logits.size()));
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
    return -(static_cast<double>(logits[static_cast<size_t>(target)]) - max - std::log(sum));
}

double PerplexityResult::perplexity() const { return scored ? std::exp(nll_sum / static_cast<double>(scored)) : 0.0; }

PerplexityResult chunked_perplexity(Engine& engine, const std::vector<int32_t>& tokens, int32_t context,
                                    int32_t bos, const PerplexityProgress& progress) {
    if (context < 4) throw Error("the perplexity context must be at least 4 tokens, not " + std::to_string(context));
    const size_t ctx = static_cast<size_t>(context);
    if (tokens.size() < 2 * ctx)
        throw Error("the text has " + std::to_string(tokens.size()) + " tokens; perplexity with a context of " +
                    std::to_string(ctx) + " needs at least " + std::to_string(2 * ctx) + " (two chunks)");
    const size_t vocab = static_cast<size_t>(engine.vocab_size());
    const size_t first = ctx / 2;  // the first position scored: each scored token sees at least ctx/2 before it
    PerplexityResult result;
    std::vector<int32_t> chunk(ctx);
    for (size_t start = 0; start + ctx <= tokens.size(); start += ctx) {
        std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(start), ctx, chunk.begin());
        if (bos >= 0) chunk[0] = bos;
        {
            const SequenceGuard seq(engine);
            const std::vector<float>& logits = engine.forward({{seq.id(), chunk, true}});  // [ctx][vocab]
            for (size_t j = first; j + 1 < ctx; ++j)
                result.nll_sum += token_nll(std::span<const float>(logits).subspan(j * vocab, vocab), chunk[j + 1]);
        }  // the chunk's blocks go back before the next one takes its own
        result.scored += ctx - 1 - first;
        ++result.chunks;
        if (progress) progress(result);
    }
    return result;
}

}  // namespace kvx
