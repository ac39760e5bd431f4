// The speculative decoding flags shared by the commands that generate text (generate, chat).
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "engine/generation/generator.h"

namespace kvx::cli {

struct SpeculativeFlags {
    int32_t drafts = 0;         // --speculative K; 0 = plain decoding
    int32_t lookup_ngram = 0;   // --lookup-ngram N; 0 = not given (kDefaultLookupNgram)
    CLI::Option* drafts_option = nullptr;
    CLI::Option* ngram_option = nullptr;
};

void add_speculative_options(CLI::App& command, SpeculativeFlags& flags);

// Puts the flags into `generation`; throws kvx::Error naming the flag when K or N is out of range or
// --lookup-ngram comes without --speculative. Commands call it before loading the model.
void apply_speculative_flags(const SpeculativeFlags& flags, GenerationOptions& generation);

// "kvx: speculative: ..." on stderr, when the generation was speculative.
void print_speculative_stats(const GenerationStats& stats);

// The tokens the decode passes gave (sampled from their logits): one per pass in plain decoding, up to
// 1 + K per pass with speculative decoding; and those per second of decoding.
int32_t decode_tokens(const GenerationStats& stats);
double decode_tokens_per_second(const GenerationStats& stats);

}  // namespace kvx::cli
