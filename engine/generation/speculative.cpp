#include "engine/generation/speculative.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/generation/prompt_lookup.h"
#include "kernels/error.h"

namespace kvx {

void check_speculative_options(const GenerationOptions& options) {
    if (options.speculative_drafts < 0 || options.speculative_drafts > kMaxSpeculativeDrafts)
        throw Error("--speculative must be from 1 to " + std::to_string(kMaxSpeculativeDrafts) + " draft tokens, not " +
                    std::to_string(options.speculative_drafts));
    if (options.lookup_ngram < 1 || options.lookup_ngram > kMaxLookupNgram)
        throw Error("--lookup-ngram must be from 1 to " + std::to_string(kMaxLookupNgram) + ", not " +
                    std::to_string(options.lookup_ngram));
}

namespace {

// The most drafts the next pass may carry: the tokens still to generate, less the one the pass gives for
// free; the room left in the context after the last token; and the blocks the pool can still hand out.
int32_t draft_budget(const Engine& engine, SeqId seq, int32_t max_drafts, int64_t still_to_generate) {
    const int64_t room = int64_t{engine.context()} - engine.length(seq) - 1;
    const int64_t wanted = std::min({int64_t{max_drafts}, still_to_generate - 1, room});
    int32_t budget = static_cast<int32_t>(std::max<int64_t>(0, wanted));
    const KvCacheManager& cache = engine.cache();
    while (budget > 0 && cache.blocks_needed(seq, budget + 1) > cache.pool().num_available()) --budget;
    return budget;
}

}  // namespace

void decode_speculative(Engine& engine, SeqId seq, Sampler& sampler, const float* first_logits,
                        std::span<const int32_t> prompt, int64_t max_new, const GenerationOptions& options,
                        const std::function<void(int32_t)>& take, GenerationStats& stats) {
    check_speculative_options(options);
    const auto& stops = options.stop_token_ids;
    const size_t vocab = static_cast<size_t>(engine.vocab_size());
    std::vector<int32_t> context(prompt.begin(), prompt.end());  // what prompt lookup searches: prompt + generated
    std::vector<int32_t> drafts;                                // [<= speculative_drafts]
    std::vector<int32_t> step;                                  // [1 + drafts]: the pass's tokens
    SpeculativeStats& spec = stats.speculative;

    // Samples a token from logits, after the interrupted poll; false when generation ends there (the
    // interrupt or a stop token). The cache then ends at `keep` tokens, as plain decoding leaves it.
    auto sample_next = [&](const float* logits, int32_t keep, int32_t& token) {
        const bool interrupted = options.interrupted && options.interrupted();
        if (!interrupted) token = sampler.sample(logits, engine.vocab_size());
        const bool stopped = !interrupted && std::find(stops.begin(), stops.end(), token) != stops.end();
        if (!interrupted && !stopped) return true;
        stats.interrupted = interrupted;
        stats.stopped_by_token = stopped;
        if (engine.length(seq) > keep) engine.rewind(seq, keep);
        return false;
    };
    auto produce = [&](int32_t token) {
        take(token);
        context.push_back(token);
        ++stats.generated_tokens;
    };

    if (max_new <= 0) return;
    int32_t last = 0;  // the newest token, not yet in the cache
    if (!sample_next(first_logits, engine.length(seq), last)) return;
    produce(last);
    while (stats.generated_tokens < max_new) {
        const int32_t base = engine.length(seq);  // the pass writes positions base .. base + drafts
        propose_drafts(context, options.lookup_ngram,
                       draft_budget(engine, seq, options.speculative_drafts, max_new - stats.generated_tokens), drafts);
        step.assign(1, last);
        step.insert(step.end(), drafts.begin(), drafts.end());
        const std::vector<float>& logits = engine.forward({{seq, step, true}});  // [1 + drafts][vocab]
        ++stats.decode_steps;
        ++spec.forward_passes;
        spec.drafted_tokens += static_cast<int32_t>(drafts.size());

        // Row i holds the logits after step[i]; the cache keeps step[0 .. i] once row i's token is taken.
        for (size_t i = 0; i < step.size(); ++i) {
            const int32_t keep = base + static_cast<int32_t>(i) + 1;
            int32_t token = 0;
            if (!sample_next(&logits[i * vocab], keep, token)) return;
            produce(token);
            ++spec.decoded_tokens;
            const bool accepted = i < drafts.size() && token == drafts[i];
            if (accepted) ++spec.accepted_tokens;
            if (accepted && stats.generated_tokens < max_new) continue;  // row i + 1 is sampled next
            // The token is new to the cache (a correction, the last row's, or the last one wanted): the
            // drafts after step[i] go, and the token waits for the next pass, or is left unappended.
            if (engine.length(seq) > keep) engine.rewind(seq, keep);
            last = token;
            break;
        }
    }
    stats.unappended_token = last;
}

}  // namespace kvx
