// The sampling flags shared by the commands that generate text (generate, chat), llama.cpp's names.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "engine/runtime/sampler.h"

namespace kvx::cli {

struct SamplingFlags {
    SamplerOptions sampling;
    int64_t seed = -1;  // -1 = a random seed, printed with the stats
};

void add_sampling_options(CLI::App& command, SamplingFlags& flags);

// The options with the seed drawn when none was given.
SamplerOptions resolve_sampling(const SamplingFlags& flags);

}  // namespace kvx::cli
