#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/error.h"

namespace kvx {

int32_t argmax(const float* logits, int vocab_size) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab_size; ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
    if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
        throw Error("--temp must be a finite number >= 0");
    if (options.top_k < 0) throw Error("--top-k must be >= 0");
    if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) throw Error("--top-p must be in (0, 1]");
}

double Sampler::next_uniform() { return std::generate_canonical<double, std::numeric_limits<double>::digits>(rng_); }

int32_t Sampler::sample(const float* logits, int vocab_size) {
    if (options_.temperature == 0.0f) return argmax(logits, vocab_size);

    // Softmax of logits / T, computed in double around the maximum so that no exp overflows.
    const float max_logit = logits[argmax(logits, vocab_size)];
    candidates_.resize(static_cast<size_t>(vocab_size));
    for (int32_t i = 0; i < vocab_size; ++i)
        candidates_[static_cast<size_t>(i)] = {
            static_cast<float>(std::exp((double{logits[i]} - max_logit) / options_.temperature)), i};
    auto by_probability = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };

    size_t kept = candidates_.size();
    if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < kept) {
        kept = static_cast<size_t>(options_.top_k);
        std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(kept), candidates_.end(), by_probability);
    } else {
        std::sort(candidates_.begin(), candidates_.end(), by_probability);
    }
    double total = 0;
    for (size_t i = 0; i < kept; ++i) total += candidates_[i].first;
    if (options_.top_p < 1.0f) {
        // The smallest prefix of the sorted candidates whose mass reaches top_p.
        double mass = 0;
        for (size_t i = 0; i < kept; ++i) {
            mass += candidates_[i].first;
            if (mass >= options_.top_p * total) { kept = i + 1; total = mass; break; }
        }
    }
    const double r = next_uniform() * total;  // what uniform_real_distribution(0, total) computes
    double cumulative = 0;
    for (size_t i = 0; i < kept; ++i) {
        cumulative += candidates_[i].first;
        if (r < cumulative) return candidates_[i].second;
    }
    return candidates_[kept - 1].second;
}

}  // namespace kvx
