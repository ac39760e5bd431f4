// Beam search over the paged KV cache: beams are sequences forked from one prefilled prompt, sharing its
// blocks by reference count, so a step copies at most the partly filled last block of each forked beam
// (copy-on-write) where a contiguous cache would physically reorder every beam's whole history.
//
// The algorithm is HF transformers' beam search with early_stopping=True, defined exactly here because
// tools/kvx_tools/fixtures/beam_search_reference.py implements the same definition independently (numpy over ONNX
// Runtime) and the tests compare hypotheses token for token:
//
//   N = num_beams. The prompt is prefilled once; its last logits start one beam of score 0 (step 0 has
//   one beam, never N copies of it). For step t = 0, 1, ..., max_new_tokens - 1:
//     1. Every live beam b, with running score s_b (the sum of its tokens' log-probabilities), offers
//        every token v as a candidate of score s_b + log_softmax(logits_b)[v]. log_softmax is computed in
//        double: x_v - m - log(sum_u exp(x_u - m)), m = max_u x_u.
//     2. Candidates are ranked by score, higher first; ties go to the lower beam index, then the lower
//        token id. Beam index = the beam's place in this step's beam list (children in rank order).
//     3. Walking the ranking from rank 0: a candidate whose token is a stop token becomes a finished
//        hypothesis if its rank is below N, and is skipped otherwise; any other candidate becomes a beam of
//        the next step. The walk ends when N next beams are taken or the candidates run out. (HF keeps the
//        top (1 + number of stop tokens) x N candidates, which always holds N non-stop ones: the same.)
//     4. A hypothesis's score is sum_logprobs / generated_len ^ length_penalty, where generated_len counts
//        the tokens whose log-probabilities the sum holds: every generated token, the stop token
//        included. Hypotheses are kept to the best N: a new one enters while fewer than N are kept or when
//        it scores above the worst kept, which then leaves (among equal worst scores the latest added).
//     5. Early stopping: once N hypotheses are kept, the search ends. If step t was the last
//        (t + 1 == max_new_tokens), the next beams join the hypotheses by the rule of 4 (generated_len =
//        max_new_tokens) and the search ends. If no next beam was taken (every candidate a stop token past
//        rank N, possible only with many stop tokens or a tiny vocabulary), it ends too: it never hangs.
//     6. Otherwise the next beams become sequences: a parent with k children is forked k - 1 times (its
//        first child keeps the parent's sequence), a parent with none is freed first, and all next beams
//        decode their new token in ONE Engine::forward, whose copy-on-write copies run as one copy_blocks
//        call.
//   Result: the kept hypotheses, best score first (equal scores: in the order they were added).
//
// Every sequence the search made is freed when it returns or throws: the pool holds afterwards what it
// held before (the prompt's full blocks may stay cached for prefix reuse, as after generate()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/runtime/engine.h"

namespace kvx {

struct BeamSearchOptions {
    int32_t num_beams = 4;          // 1 .. 64
    float length_penalty = 1.0f;    // finite, >= 0; 0 ranks by the plain sum of log-probabilities
    int32_t max_new_tokens = 32;    // >= 1
    std::vector<int> stop_token_ids;
};

struct BeamHypothesis {
    std::vector<int32_t> tokens;  // generated tokens, ending with the stop token when stopped_by_token
    double score = 0;             // sum_logprobs / generated_len ^ length_penalty, generated_len = tokens.size()
    double sum_logprobs = 0;
    bool stopped_by_token = false;
};

struct BeamSearchStats {
    int32_t prompt_tokens = 0;
    double prefill_seconds = 0;
    int32_t decode_steps = 0;        // batched forward passes after the prefill
    int64_t decode_tokens = 0;       // tokens those passes appended (one per live beam per step)
    double decode_seconds = 0;       // the steps, selection included
    int32_t selection_steps = 0;     // candidate rankings: decode_steps + 1
    int32_t max_beam_length = 0;     // longest sequence the cache held (prompt + appended tokens)
    int32_t peak_blocks_in_use = 0;  // measured after every forward pass
    size_t peak_bytes_in_use = 0;
    int64_t blocks_copied = 0;       // copy-on-write copies over all steps
    size_t bytes_copied = 0;
    // The physical-reorder design for comparison: one contiguous cache per beam holding every position,
    // beams x max_beam_length tokens, and the bytes reordering all of them moves before each step.
    size_t contiguous_bytes = 0;
    size_t reorder_bytes = 0;
};

struct BeamSearchResult {
    std::vector<BeamHypothesis> hypotheses;  // best first, at most num_beams
    BeamSearchStats stats;
};

// Blocks the search may need at its peak: the prompt's full blocks, shared, plus every beam's own copy of
// the rest of a sequence of prompt_len + max_new_tokens tokens (the worst case: no sharing past the prompt).
int64_t beam_search_blocks_needed(int64_t prompt_len, const BeamSearchOptions& options, int32_t block_size);

// Throws kvx::Error, before any work, for options out of range, an empty prompt, a prompt and
// max_new_tokens beyond the context, or a pool with fewer available blocks than beam_search_blocks_needed.
BeamSearchResult beam_search(Engine& engine, std::span<const int32_t> prompt, const BeamSearchOptions& options);

}  // namespace kvx
