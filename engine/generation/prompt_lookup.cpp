#include "engine/generation/prompt_lookup.h"

#include <algorithm>

namespace kvx {

void propose_drafts(std::span<const int32_t> context, int32_t max_ngram, int32_t max_drafts,
                    std::vector<int32_t>& drafts) {
    drafts.clear();
    const int64_t length = static_cast<int64_t>(context.size());
    if (max_drafts <= 0) return;
    for (int64_t n = std::min<int64_t>(max_ngram, length - 1); n >= 1; --n) {
        const std::span<const int32_t> suffix = context.last(static_cast<size_t>(n));
        // Candidate starts from the latest whose match ends before the last token (start + n < length).
        for (int64_t start = length - n - 1; start >= 0; --start) {
            if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
            // Draft j copies the token at from + j of the context followed by the drafts (from < length,
            // so a position past the context names a draft already written).
            const int64_t from = start + n;
            for (int64_t j = 0; j < max_drafts; ++j) {
                const int64_t at = from + j;
                drafts.push_back(at < length ? context[static_cast<size_t>(at)]
                                             : drafts[static_cast<size_t>(at - length)]);
            }
            return;
        }
    }
}

}  // namespace kvx
