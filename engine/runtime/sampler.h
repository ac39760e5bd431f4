// Picks the next token from a row of logits: greedy at temperature 0, else temperature, then top-k, then
// top-p (nucleus) filtering, then a draw from a seeded generator, so a seed reproduces a run exactly.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace kvx {

struct SamplerOptions {
    float temperature = 0.8f;  // 0 = greedy
    int top_k = 40;            // 0 = no top-k filter
    float top_p = 0.95f;       // 1 = no nucleus filter
    uint64_t seed = 0;
};

class Sampler {
public:
    explicit Sampler(const SamplerOptions& options);  // throws kvx::Error for out-of-range options

    int32_t sample(const float* logits, int vocab_size);  // logits [vocab_size]

    const SamplerOptions& options() const { return options_; }
    // The draw sample() makes once per call at temperature > 0, in [0, 1): a backend that samples on the
    // device takes it from here, so that a seed gives the same tokens on every backend.
    double next_uniform();

private:
    SamplerOptions options_;
    std::mt19937_64 rng_;                          // the standard fixes its output sequence for a seed
    std::vector<std::pair<float, int32_t>> candidates_;  // [vocab_size] (probability, token), reused
};

// Index of the largest logit; the lowest index wins a tie.
int32_t argmax(const float* logits, int vocab_size);

}  // namespace kvx
