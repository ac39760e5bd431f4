// Prompt-lookup drafting for speculative decoding: guesses the next tokens by finding where the context's
// last few tokens occurred before and proposing what followed them there. No draft model: it pays off on
// text that repeats its context (summaries, code edits, quoted passages, lists), costs nothing elsewhere.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvx {

// Longest n-gram tried by default. 3 tokens rarely match by chance, so a hit usually means the text really
// repeats; shorter ones are tried only when no 3-gram matches (kvx generate --lookup-ngram).
constexpr int32_t kDefaultLookupNgram = 3;
constexpr int32_t kMaxLookupNgram = 8;

// Writes to `drafts` (cleared first) max_drafts tokens that follow the most recent earlier occurrence of
// the context's last n tokens, for n = max_ngram down to 1, stopping at the first n that occurs. The
// occurrence must end before the last token (the suffix itself does not count), and may overlap it.
// Where the tokens that followed it reach the end of the context, the copy goes on over the drafts already
// written, as an LZ77 copy overlaps its output: the repetition is assumed to continue, so a loop of period
// p (a run of one token: p = 1) still gives max_drafts drafts, not p. Nothing is proposed when no n
// matches, when max_drafts <= 0, or when the context is shorter than 2 tokens. The caller keeps
// max_drafts within the context limit.
//
// Choices: the most recent occurrence, since text that repeats tends to repeat what it said last; the
// longest n first, since a longer match predicts better; down to n = 1, since a rejected draft costs only
// an extra row in a forward pass that streams the same weights either way. Cost: a backward scan of the
// context per n, O(max_ngram * context) comparisons, microseconds beside a forward pass.
void propose_drafts(std::span<const int32_t> context, int32_t max_ngram, int32_t max_drafts,
                    std::vector<int32_t>& drafts);

}  // namespace kvx
