#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "engine/runtime/sampler.h"
#include "kernels/error.h"

using namespace kvx;

TEST_CASE("greedy picks the largest logit, the lowest index on a tie", "[sampler]") {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
    Sampler greedy(SamplerOptions{0.0f, 40, 0.95f, 7});
    CHECK(greedy.sample(logits.data(), 4) == 1);
    CHECK(argmax(logits.data(), 4) == 1);
}

TEST_CASE("top-k 1 is greedy at any temperature", "[sampler]") {
    const std::vector<float> logits = {0.1f, 0.3f, 3.0f, 0.2f};
    Sampler s(SamplerOptions{5.0f, 1, 1.0f, 3});
    for (int i = 0; i < 100; ++i) CHECK(s.sample(logits.data(), 4) == 2);
}

TEST_CASE("sampling follows the softmax, filtered by top-k and top-p", "[sampler]") {
    const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    auto frequencies = [&](SamplerOptions o) {
        Sampler s(o);
        std::map<int, double> count;
        const int n = 40000;
        for (int i = 0; i < n; ++i) count[s.sample(logits.data(), 4)] += 1.0 / n;
        return count;
    };
    auto all = frequencies({1.0f, 0, 1.0f, 11});
    CHECK(all[0] == Approx(0.5).margin(0.015));
    CHECK(all[1] == Approx(0.3).margin(0.015));
    CHECK(all[2] == Approx(0.15).margin(0.015));
    CHECK(all[3] == Approx(0.05).margin(0.01));
    auto top2 = frequencies({1.0f, 2, 1.0f, 12});
    CHECK(top2[0] == Approx(0.5 / 0.8).margin(0.015));
    CHECK(top2.count(2) == 0);
    CHECK(top2.count(3) == 0);
    auto nucleus = frequencies({1.0f, 0, 0.7f, 13});  // 0.5 + 0.3 is the smallest mass reaching 0.7
    CHECK(nucleus[1] == Approx(0.3 / 0.8).margin(0.015));
    CHECK(nucleus.count(2) == 0);
}

TEST_CASE("a seed reproduces the draw", "[sampler]") {
    std::vector<float> logits(100);
    for (int i = 0; i < 100; ++i) logits[static_cast<size_t>(i)] = std::sin(static_cast<float>(i));
    Sampler a(SamplerOptions{1.0f, 0, 1.0f, 42}), b(SamplerOptions{1.0f, 0, 1.0f, 42}), c(SamplerOptions{1.0f, 0, 1.0f, 43});
    std::vector<int32_t> ra, rb, rc;
    for (int i = 0; i < 50; ++i) {
        ra.push_back(a.sample(logits.data(), 100));
        rb.push_back(b.sample(logits.data(), 100));
        rc.push_back(c.sample(logits.data(), 100));
    }
    CHECK(ra == rb);
    CHECK(ra != rc);
}

TEST_CASE("sampler options out of range are refused", "[sampler][errors]") {
    CHECK_THROWS_WITH(Sampler(SamplerOptions{-1.0f, 0, 1.0f, 0}), Catch::Contains("--temp"));
    CHECK_THROWS_WITH(Sampler(SamplerOptions{1.0f, -2, 1.0f, 0}), Catch::Contains("--top-k"));
    CHECK_THROWS_WITH(Sampler(SamplerOptions{1.0f, 0, 0.0f, 0}), Catch::Contains("--top-p"));
    CHECK_THROWS_WITH(Sampler(SamplerOptions{1.0f, 0, 1.5f, 0}), Catch::Contains("--top-p"));
}
