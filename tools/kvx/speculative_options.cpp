#include "speculative_options.h"

#include <cstdio>
#include <string>

#include "engine/generation/prompt_lookup.h"
#include "engine/generation/speculative.h"
#include "kernels/error.h"

namespace kvx::cli {

void add_speculative_options(CLI::App& cmd, SpeculativeFlags& f) {
    f.drafts_option = cmd.add_option("--speculative", f.drafts,
                                     "Speculative decoding: verify up to K prompt-lookup draft tokens per forward "
                                     "pass (1.." + std::to_string(kMaxSpeculativeDrafts) +
                                         "); the output is the same as without it");
    f.ngram_option = cmd.add_option("--lookup-ngram", f.lookup_ngram,
                                    "Longest n-gram prompt lookup matches, tried down to 1 (1.." +
                                        std::to_string(kMaxLookupNgram) + ", default " +
                                        std::to_string(kDefaultLookupNgram) + "); needs --speculative");
}

void apply_speculative_flags(const SpeculativeFlags& f, GenerationOptions& generation) {
    const bool given = f.drafts_option && f.drafts_option->count() > 0;
    const bool ngram_given = f.ngram_option && f.ngram_option->count() > 0;
    if (given && f.drafts == 0)  // 0 would silently mean plain decoding
        throw Error("--speculative must be from 1 to " + std::to_string(kMaxSpeculativeDrafts) +
                    " draft tokens, not 0");
    if (ngram_given && !given) throw Error("--lookup-ngram needs --speculative K");
    generation.speculative_drafts = f.drafts;
    generation.lookup_ngram = ngram_given ? f.lookup_ngram : kDefaultLookupNgram;
    check_speculative_options(generation);
}

void print_speculative_stats(const GenerationStats& s) {
    const SpeculativeStats& spec = s.speculative;
    if (spec.forward_passes == 0 && spec.drafted_tokens == 0) return;
    std::fprintf(stderr, "kvx: speculative: drafted %d tokens, accepted %d (%.1f%%), %d forward passes, %.2f tokens "
                         "per pass\n",
                 spec.drafted_tokens, spec.accepted_tokens, 100.0 * spec.acceptance_rate(), spec.forward_passes,
                 spec.tokens_per_pass());
}

int32_t decode_tokens(const GenerationStats& s) {
    return s.speculative.forward_passes > 0 ? s.speculative.decoded_tokens : s.decode_steps;
}

double decode_tokens_per_second(const GenerationStats& s) {
    return s.decode_seconds > 0 ? decode_tokens(s) / s.decode_seconds : 0.0;
}

}  // namespace kvx::cli
