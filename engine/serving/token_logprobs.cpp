#include "engine/serving/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvx {

void fill_logprobs(const float* logits, int32_t vocab_size, int32_t k, SampledToken& token) {
    const float max = *std::max_element(logits, logits + vocab_size);
    double sum = 0;
    for (int32_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
    const double log_sum = std::log(sum) + max;
    auto logprob = [&](int32_t i) { return static_cast<float>(logits[i] - log_sum); };
    token.logprob = logprob(token.token);
    token.top.clear();
    k = std::min(k, vocab_size);
    if (k <= 0) return;
    std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int32_t i = 0; i < k; ++i) token.top.push_back({ids[static_cast<size_t>(i)], logprob(ids[static_cast<size_t>(i)]), {}});
}

}  // namespace kvx
