#include "sampling_options.h"

#include <random>

namespace kvx::cli {

void add_sampling_options(CLI::App& cmd, SamplingFlags& f) {
    cmd.add_option("--temp", f.sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
    cmd.add_option("--top-k", f.sampling.top_k, "Keep the k most likely tokens; 0 = all")->capture_default_str();
    cmd.add_option("--top-p", f.sampling.top_p, "Keep the smallest set of tokens with this much probability; 1 = all")
        ->capture_default_str();
    cmd.add_option("-s,--seed", f.seed, "Random seed; -1 = a random one (printed at the end)")->capture_default_str();
}

SamplerOptions resolve_sampling(const SamplingFlags& f) {
    SamplerOptions options = f.sampling;
    options.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed) : std::random_device{}();
    return options;
}

}  // namespace kvx::cli
