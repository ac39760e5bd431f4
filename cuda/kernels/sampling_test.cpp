// cuda/kernels/sampling.cu against the host's token selection itself (engine/runtime/sampler.h): argmax against kvx::argmax,
// and sample_top_k_top_p against kvx::Sampler::sample. Sampler keeps its generator private; its one draw per
// call is std::uniform_real_distribution<double>(0, total), which libstdc++ computes as
// generate_canonical<double, 53>(rng) * total. So a second mt19937_64 with the same seed draws the uniform the
// device gets, and a fresh Sampler's first sample must be the device's token exactly.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/test_support.h"
#include "engine/runtime/sampler.h"
#include "kernels/error.h"

namespace {

using namespace kvx::cuda::test;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST_CASE("argmax picks the host's index") {
    SECTION("argmax picks the host's index: lowest index on ties, NaN never greater, all -inf") {
        const int vocab = 1000;
        std::vector<std::vector<float>> rows;
        rows.push_back(random_floats(vocab, 1));
        rows.push_back(std::vector<float>(vocab, 0.5f));       // all tied: 0
        rows.push_back(std::vector<float>(vocab, -kInf));      // all -inf: 0
        std::vector<float> repeated = random_floats(vocab, 2);
        for (int i : {613, 77, 999}) repeated[static_cast<size_t>(i)] = 2.0f;  // the max three times: 77
        rows.push_back(repeated);
        std::vector<float> nan_first = random_floats(vocab, 3);
        nan_first[0] = kNaN;  // the host keeps index 0
        rows.push_back(nan_first);
        std::vector<float> nans = random_floats(vocab, 4);
        for (size_t i = 1; i < nans.size(); i += 3) nans[i] = kNaN;
        nans[500] = 1.5f;
        rows.push_back(nans);
        std::vector<float> last = std::vector<float>(vocab, -kInf);
        last[vocab - 1] = -1e30f;
        rows.push_back(last);
        std::vector<float> flat;
        std::vector<int32_t> want;
        for (const std::vector<float>& r : rows) {
            flat.insert(flat.end(), r.begin(), r.end());
            want.push_back(kvx::argmax(r.data(), vocab));
        }
        auto d_logits = to_device(flat);
        auto d_tokens = poisoned<int32_t>(rows.size());
        kvx::cuda::argmax(d_tokens.data(), d_logits.data(), static_cast<int>(rows.size()), vocab, nullptr);
        CHECK(to_host(d_tokens) == want);
    }
    SECTION("argmax over tiny and large vocabularies") {
        for (int vocab : {1, 2, 3, 33, 50257}) {
            INFO("vocab " << vocab);
            const int n_rows = 3;
            const std::vector<float> logits = random_floats(static_cast<size_t>(n_rows) * static_cast<size_t>(vocab), 5, -8.0f, 8.0f);
            std::vector<int32_t> want;
            for (int r = 0; r < n_rows; ++r) want.push_back(kvx::argmax(logits.data() + static_cast<size_t>(r) * static_cast<size_t>(vocab), vocab));
            auto d_logits = to_device(logits);
            auto d_tokens = poisoned<int32_t>(static_cast<size_t>(n_rows));
            kvx::cuda::argmax(d_tokens.data(), d_logits.data(), n_rows, vocab, nullptr);
            CHECK(to_host(d_tokens) == want);
        }
    }
}

// The device's token for one row with the uniform a fresh mt19937_64(seed) draws first, against a fresh
// Sampler's first sample.
void check_sample(const std::vector<float>& logits, float temperature, int top_k, float top_p, uint64_t seed) {
    const int vocab = static_cast<int>(logits.size());
    INFO("vocab " << vocab << " temperature " << temperature << " top_k " << top_k << " top_p " << top_p << " seed " << seed);
    kvx::Sampler sampler({temperature, top_k, top_p, seed});
    const int32_t want = sampler.sample(logits.data(), vocab);
    std::mt19937_64 rng(seed);
    const double uniform = std::generate_canonical<double, 53>(rng);

    auto d_logits = to_device(logits);
    kvx::cuda::DeviceBuffer<unsigned char> scratch(kvx::cuda::sampling_scratch_bytes(vocab));
    poison(scratch);
    auto d_token = poisoned<int32_t>(1);
    kvx::cuda::sample_top_k_top_p(d_token.data(), d_logits.data(), vocab, temperature, top_k, top_p, uniform,
                                  scratch.data(), nullptr);
    CHECK(to_host(d_token)[0] == want);
}

// Logits drawn from a handful of values, so that many probabilities are exactly equal and the top-k
// threshold falls inside a run of ties.
std::vector<float> tied_logits(size_t n, int distinct, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> level(0, distinct - 1);
    std::vector<float> v(n);
    for (float& x : v) x = 0.5f * static_cast<float>(level(rng));
    return v;
}

TEST_CASE("sample_top_k_top_p draws the host Sampler's token") {
    SECTION("sample_top_k_top_p draws the host Sampler's token on random logits") {
        const std::vector<float> logits = random_floats(5000, 6, -6.0f, 6.0f);
        for (float temperature : {0.1f, 0.8f, 1.0f, 2.5f})
            for (int top_k : {1, 2, 40, 1024})
                for (float top_p : {1.0f, 0.95f, 0.5f, 0.01f})
                    for (uint64_t seed : {0u, 1u, 42u}) check_sample(logits, temperature, top_k, top_p, seed);
    }
    SECTION("sample_top_k_top_p breaks ties by index as the host's sort does") {
        for (int distinct : {1, 2, 5})
            for (int top_k : {1, 3, 40, 1024})
                for (float top_p : {1.0f, 0.9f, 0.3f})
                    for (uint64_t seed : {3u, 4u, 5u, 6u}) check_sample(tied_logits(3000, distinct, 7), 1.0f, top_k, top_p, seed);
    }
    SECTION("sample_top_k_top_p on tiny vocabularies and top_k beyond the vocabulary") {
        for (int vocab : {1, 2, 3, 5, 17})
            for (int top_k : {1, 4, 1024})
                for (float top_p : {1.0f, 0.6f})
                    for (uint64_t seed = 0; seed < 8; ++seed)
                        check_sample(random_floats(static_cast<size_t>(vocab), static_cast<uint32_t>(8 + seed), -2.0f, 2.0f), 0.7f,
                                     top_k, top_p, seed);
    }
    SECTION("sample_top_k_top_p with masked (-inf) logits, underflowing probabilities and a large vocabulary") {
        std::vector<float> masked = random_floats(4000, 9, -3.0f, 3.0f);
        for (size_t i = 0; i < masked.size(); i += 2) masked[i] = -kInf;
        std::vector<float> spread = random_floats(4000, 10, -200.0f, 200.0f);  // most probabilities round to 0
        const std::vector<float> large = random_floats(50257, 11, -10.0f, 10.0f);
        for (uint64_t seed : {11u, 12u, 13u}) {
            for (int top_k : {5, 1024}) {
                check_sample(masked, 0.9f, top_k, 0.9f, seed);
                check_sample(spread, 1.3f, top_k, 1.0f, seed);
                check_sample(large, 0.6f, top_k, 0.95f, seed);
            }
        }
    }
    SECTION("sample_top_k_top_p rejects options the device cannot honour with kvx::Error") {
        kvx::cuda::DeviceBuffer<unsigned char> scratch(kvx::cuda::sampling_scratch_bytes(8));
        auto call = [&](float temperature, int top_k, float top_p) {
            kvx::cuda::sample_top_k_top_p(nullptr, nullptr, 8, temperature, top_k, top_p, 0.5, scratch.data(), nullptr);
        };
        CHECK_THROWS_AS(call(1.0f, 0, 1.0f), kvx::Error);
        CHECK_THROWS_AS(call(1.0f, kvx::cuda::kMaxDeviceTopK + 1, 1.0f), kvx::Error);
        CHECK_THROWS_AS(call(0.0f, 40, 1.0f), kvx::Error);
        CHECK_THROWS_AS(call(1.0f, 40, 0.0f), kvx::Error);
    }
}

}  // namespace
