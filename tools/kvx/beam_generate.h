// kvx generate --beams N: beam search (engine/generation/beam_search.h) instead of sampling. The best hypothesis goes
// to stdout as generate prints text (or ids, for a model without a tokenizer); stderr gets the steps, speed
// and the KV cache accounting: blocks the beams share against a contiguous cache per beam.
#pragma once

#include <cstdint>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend_choice.h"
#include "engine/tokenizer/tokenizer.h"
#include "sampling_options.h"

namespace kvx::cli {

struct BeamFlags {
    int beams = 0;               // 0 = not asked for: sampling
    float length_penalty = 1.0f;
};

void add_beam_options(CLI::App& command, BeamFlags& flags);

// Whether the command line asks for beam search. Throws kvx::Error for what cannot go together: --beams
// outside 1..64, a negative or non-finite --length-penalty, --length-penalty without --beams, and --beams
// with --temp > 0, --top-k or --top-p (beam search is deterministic).
bool beam_search_requested(const CLI::App& command, const BeamFlags& flags, const SamplingFlags& sampling);

// Starts the model's engine with a pool sized for the beams, runs the search and prints its best hypothesis
// after the prompt. n_new = -1: up to the context. verbose: every cache operation on stderr as it happens.
void run_beam_generate(LoadedModel& loaded, const RunOptions& run, const Tokenizer& tokenizer,
                       const std::vector<int32_t>& prompt, int n_new, const BeamFlags& flags, bool verbose);

}  // namespace kvx::cli
