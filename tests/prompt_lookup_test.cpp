// Prompt-lookup drafting against a brute-force search written here from the definition: list every
// earlier occurrence of every suffix length, keep the rule's pick.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "engine/generation/prompt_lookup.h"

using namespace kvx;

namespace {

// The definition, spelled out the slow way: for n = max_ngram down to 1, every start s with s + n <= size - 1
// whose n tokens equal the last n; the largest such s wins; the drafts are the max_drafts tokens that follow
// it, in the context and then in the drafts themselves.
std::vector<int32_t> brute_force(const std::vector<int32_t>& context, int32_t max_ngram, int32_t max_drafts) {
    const int size = static_cast<int>(context.size());
    for (int n = max_ngram; n >= 1; --n) {
        if (n > size - 1) continue;
        std::vector<int> starts;
        for (int s = 0; s + n <= size - 1; ++s) {
            bool equal = true;
            for (int j = 0; j < n; ++j) equal = equal && context[s + j] == context[size - n + j];
            if (equal) starts.push_back(s);
        }
        if (starts.empty()) continue;
        // The copy runs on over its own output: the context grown by each draft as it is written.
        std::vector<int32_t> grown = context;
        for (int p = starts.back() + n; static_cast<int>(grown.size()) - size < max_drafts; ++p)
            grown.push_back(grown[static_cast<size_t>(p)]);
        return std::vector<int32_t>(grown.begin() + size, grown.end());
    }
    return {};
}

std::vector<int32_t> lookup(const std::vector<int32_t>& context, int32_t max_ngram, int32_t max_drafts) {
    std::vector<int32_t> drafts = {-7};  // cleared by the call
    propose_drafts(context, max_ngram, max_drafts, drafts);
    return drafts;
}

}  // namespace

TEST_CASE("prompt lookup proposes what followed the latest earlier match of the longest suffix",
          "[speculative][prompt_lookup]") {
    // "a b c d a b c" -> the 3-gram "a b c" occurred at 0, followed by "d a b c", then by the drafts.
    CHECK(lookup({1, 2, 3, 4, 1, 2, 3}, 3, 8) == std::vector<int32_t>{4, 1, 2, 3, 4, 1, 2, 3});
    CHECK(lookup({1, 2, 3, 4, 1, 2, 3}, 3, 2) == std::vector<int32_t>{4, 1});
    // The latest match wins: "x 5" twice, the later one followed by 7.
    CHECK(lookup({9, 5, 6, 9, 5, 7, 9, 5}, 2, 4) == std::vector<int32_t>{7, 9, 5, 7});
    // No 3-gram or 2-gram match: the 1-gram "3" falls back to its latest earlier occurrence.
    CHECK(lookup({3, 8, 4, 3}, 3, 3) == std::vector<int32_t>{8, 4, 3});
    // A 3-gram match is preferred to a later 1-gram one.
    CHECK(lookup({1, 2, 3, 5, 3, 0, 1, 2, 3}, 3, 1) == std::vector<int32_t>{5});
    CHECK(lookup({1, 2, 3, 5, 3, 0, 1, 2, 3}, 1, 3) == std::vector<int32_t>{0, 1, 2});
    // A run of one token: the match overlaps the suffix, and the copy goes on over the drafts.
    CHECK(lookup({4, 4, 4, 4}, 3, 5) == std::vector<int32_t>{4, 4, 4, 4, 4});
    CHECK(lookup({7, 1, 2, 1, 2}, 3, 5) == std::vector<int32_t>{1, 2, 1, 2, 1});
    // Nothing to propose: no match, too short, no budget.
    CHECK(lookup({1, 2, 3, 4}, 3, 8).empty());
    CHECK(lookup({5}, 3, 8).empty());
    CHECK(lookup({}, 3, 8).empty());
    CHECK(lookup({1, 2, 1, 2}, 3, 0).empty());
}

TEST_CASE("prompt lookup agrees with a brute-force search on random contexts", "[speculative][prompt_lookup]") {
    std::mt19937 rng(5);
    int proposals = 0, nonempty = 0;
    for (int alphabet : {1, 2, 3, 5, 20})
        for (int trial = 0; trial < 400; ++trial) {
            std::vector<int32_t> context(rng() % 70);
            for (int32_t& t : context) t = static_cast<int32_t>(rng() % static_cast<unsigned>(alphabet));
            const int32_t max_ngram = 1 + static_cast<int32_t>(rng() % kMaxLookupNgram);
            const int32_t max_drafts = static_cast<int32_t>(rng() % 12);
            INFO("alphabet " << alphabet << " size " << context.size() << " n " << max_ngram << " K " << max_drafts);
            const std::vector<int32_t> expected = brute_force(context, max_ngram, max_drafts);
            CHECK(lookup(context, max_ngram, max_drafts) == expected);
            ++proposals;
            nonempty += expected.empty() ? 0 : 1;
        }
    CHECK(nonempty > proposals / 2);  // the comparison covered real proposals, not only empty ones
}
