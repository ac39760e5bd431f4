// Speculative decoding with prompt-lookup drafts (engine/generation/prompt_lookup.h), verified by the model itself.
//
// Each pass feeds [last token, d1 .. dk] to one forward pass with every row's logits. Row i's logits are
// those a plain decode step would give after d_i (after the last token for i = 0), so the sampler picks
// from row i exactly the token plain decoding would pick there; while that token equals d(i+1) the draft
// is accepted and row i + 1 is sampled next. The first token unlike its draft (or, all drafts accepted,
// the token from the last row) comes free with the pass and is the next pass's last token. The rejected
// drafts are rewound (Engine::rewind), so the cache holds exactly the tokens plain decoding would hold.
//
//   cache before: ... t0      pass: [t, d1, d2, d3]      sampled from rows: s1 = d1, s2 = d2, s3 != d3
//   cache after:  ... t0 t d1 d2                          next pass starts from s3
//
// Identity with plain decoding needs the logits of a row of a multi-row pass to equal, bit for bit, a
// single-row decode's: the CPU kernels compute every row alone (docs/kv-cache.md). Then greedy output is
// identical, and so is sampled output for the same seed: the sampler is called once per produced token, in
// the same order, on the same logits, so the random draws line up.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "engine/generation/generation_options.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"

namespace kvx {

constexpr int32_t kMaxSpeculativeDrafts = 32;

// Throws kvx::Error naming the option when speculative_drafts is outside 0..kMaxSpeculativeDrafts or
// lookup_ngram outside 1..kMaxLookupNgram.
void check_speculative_options(const GenerationOptions& options);

// continue_sequence's decode loop with drafts, run after the prefill of `prompt` into seq. first_logits
// are the prefill's last row; up to max_new tokens are sampled. `take` receives each generated token as
// it is accepted. Stop tokens, the interrupted poll (before each sampled token) and unappended_token are
// as in plain decoding, and the cache ends exactly where plain decoding leaves it. Fills stats'
// generated_tokens, decode_steps, stopped_by_token, interrupted, unappended_token and speculative.
void decode_speculative(Engine& engine, SeqId seq, Sampler& sampler, const float* first_logits,
                        std::span<const int32_t> prompt, int64_t max_new, const GenerationOptions& options,
                        const std::function<void(int32_t)>& take, GenerationStats& stats);

}  // namespace kvx
