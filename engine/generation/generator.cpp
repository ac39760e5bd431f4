#include "engine/generation/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/generation/seconds_since.h"
#include "engine/generation/speculative.h"
#include "engine/runtime/sequence_guard.h"
#include "kernels/error.h"

namespace kvx {
namespace {

void record_cache(const Engine& engine, GenerationStats& stats) {
    stats.kv_usage = engine.cache_usage();
    stats.kv_groups = engine.cache_usage_by_group();
}

// How many tokens appending n_new tokens to seq may then generate; throws kvx::Error when the new tokens,
// or they and max_new_tokens, do not fit the context.
int64_t checked_max_new(const Engine& engine, SeqId seq, size_t n_new, int32_t max_new_tokens) {
    const int64_t context = engine.context();
    const int64_t cached = engine.length(seq);
    const int64_t total = cached + static_cast<int64_t>(n_new);
    if (n_new == 0) throw Error("nothing to append: the prompt is empty and the model has no BOS token");
    if (total > context)
        throw Error(cached == 0 ? "the prompt is " + std::to_string(n_new) +
                                      " tokens, longer than the context of " + std::to_string(context) +
                                      " (raise -c, up to the model's maximum)"
                                : "the conversation (" + std::to_string(cached) + " tokens) and the new " +
                                      std::to_string(n_new) + " tokens exceed the context of " +
                                      std::to_string(context) + " (raise -c, up to the model's maximum)");
    if (max_new_tokens < -1) throw Error("-n must be -1 (until the context is full) or >= 0");
    if (max_new_tokens >= 0 && total + max_new_tokens > context)
        throw Error("the prompt (" + std::to_string(total) + " tokens) and -n " + std::to_string(max_new_tokens) +
                    " exceed the context of " + std::to_string(context) + " tokens: raise -c or lower -n");
    // Prompt and generated tokens together never exceed the context, as with an explicit -n.
    return max_new_tokens >= 0 ? max_new_tokens : context - total;
}

}  // namespace

GenerationStats continue_sequence(Engine& engine, SeqId seq, const Tokenizer& tokenizer, Sampler& sampler,
                                  std::span<const int32_t> new_tokens, const GenerationOptions& options,
                                  const std::function<void(std::string_view)>& emit, std::vector<int32_t>* generated) {
    const int64_t max_new = checked_max_new(engine, seq, new_tokens.size(), options.max_new_tokens);
    check_speculative_options(options);

    GenerationStats stats;
    stats.prompt_tokens = static_cast<int32_t>(new_tokens.size());
    stats.cached_tokens = engine.length(seq);
    auto start = std::chrono::steady_clock::now();
    int32_t prev = new_tokens.back();
    if (options.speculative_drafts > 0) {
        const std::vector<float>* logits = &engine.forward({{seq, new_tokens, false}});
        stats.prefill_seconds = seconds_since(start);
        start = std::chrono::steady_clock::now();
        decode_speculative(engine, seq, sampler, logits->data(), new_tokens, max_new, options, [&](int32_t next) {
            emit(tokenizer.decode(prev, next));
            if (generated) generated->push_back(next);
            prev = next;
        }, stats);
        stats.decode_seconds = seconds_since(start);
        record_cache(engine, stats);
        return stats;
    }
    // Each pass returns the token that follows it: picked on the device where the backend can (only the
    // token crosses to the host), else from the logits by the sampler.
    int32_t next = engine.forward_and_sample({seq, new_tokens, false}, sampler);
    stats.prefill_seconds = seconds_since(start);

    start = std::chrono::steady_clock::now();
    const auto& stops = options.stop_token_ids;
    int32_t next_token[1] = {0};
    const SequenceInput decode_step = {seq, next_token, false};  // reused: no allocation per token
    for (int64_t i = 0; i < max_new; ++i) {
        if (options.interrupted && options.interrupted()) {
            stats.interrupted = true;
            break;
        }
        if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
            stats.stopped_by_token = true;
            break;
        }
        emit(tokenizer.decode(prev, next));
        if (generated) generated->push_back(next);
        prev = next;
        ++stats.generated_tokens;
        if (i + 1 == max_new) {  // the last token needs no forward pass
            stats.unappended_token = next;
            break;
        }
        next_token[0] = next;
        next = engine.forward_and_sample(decode_step, sampler);
        ++stats.decode_steps;
    }
    stats.decode_seconds = seconds_since(start);
    record_cache(engine, stats);
    return stats;
}

GenerationStats generate(Engine& engine, const Tokenizer& tokenizer, Sampler& sampler,
                         const std::vector<int32_t>& prompt, const GenerationOptions& options,
                         const std::function<void(std::string_view)>& emit) {
    if (prompt.empty()) throw Error("the prompt is empty and the model has no BOS token to start from");
    const SequenceGuard seq(engine);
    checked_max_new(engine, seq.id(), prompt.size(), options.max_new_tokens);  // an error prints nothing
    check_speculative_options(options);
    int32_t prev = -1;
    for (int32_t token : prompt) {  // echoed before the prefill, so a long prompt shows at once
        emit(tokenizer.decode(prev, token));
        prev = token;
    }
    return continue_sequence(engine, seq.id(), tokenizer, sampler, prompt, options, emit);
}

}  // namespace kvx
