// token_nll, the one piece of perplexity.h that needs no model: against log-softmax written out by hand, and
// stable where exp(logit) alone would overflow. The chunking is checked end to end against llama.cpp's own
// figure (tests/python/test_quantized_gguf.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/generation/perplexity.h"
#include "kernels/error.h"

using namespace kvx;

TEST_CASE("token_nll is -log softmax of the target") {
    const std::vector<float> logits = {1.0f, 2.0f, 0.5f};
    const double sum = std::exp(1.0) + std::exp(2.0) + std::exp(0.5);
    CHECK(token_nll(logits, 1) == Approx(-std::log(std::exp(2.0) / sum)).epsilon(1e-12));
    CHECK(token_nll(logits, 2) == Approx(-std::log(std::exp(0.5) / sum)).epsilon(1e-12));
}

TEST_CASE("token_nll stays finite for logits whose exponentials overflow") {
    const std::vector<float> logits = {1000.0f, 1000.0f};
    CHECK(token_nll(logits, 0) == Approx(std::log(2.0)).epsilon(1e-12));
}

TEST_CASE("token_nll refuses a target outside the vocabulary") {
    const std::vector<float> logits = {0.0f, 0.0f};
    CHECK_THROWS_AS(token_nll(logits, 2), Error);
    CHECK_THROWS_AS(token_nll(logits, -1), Error);
}
