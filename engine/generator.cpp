#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"

namespace kvx {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GenerationStats generate(Engine& engine, const Tokenizer& tokenizer, Sampler& sampler,
                         const std::vector<int32_t>& prompt, const GenerationOptions& options,
                         const std::function<void(std::string_view)>& emit) {
    const int64_t context = engine.context();
    if (prompt.empty()) throw Error("the prompt is empty and the model has no BOS token to start from");
    if (static_cast<int64_t>(prompt.size()) > context)
        throw Error("the prompt is " + std::to_string(prompt.size()) + " tokens, longer than the context of " +
                    std::to_string(context) + " (raise -c, up to the model's maximum)");
    if (options.max_new_tokens < -1) throw Error("-n must be -1 (until the context is full) or >= 0");
    if (options.max_new_tokens >= 0 && static_cast<int64_t>(prompt.size()) + options.max_new_tokens > context)
        throw Error("the prompt (" + std::to_string(prompt.size()) + " tokens) and -n " +
                    std::to_string(options.max_new_tokens) + " exceed the context of " + std::to_string(context) +
                    " tokens: raise -c or lower -n");
    const int64_t max_new = options.max_new_tokens >= 0 ? options.max_new_tokens : context - static_cast<int64_t>(prompt.size());

    GenerationStats stats;
    stats.prompt_tokens = static_cast<int32_t>(prompt.size());
    int32_t prev = -1;
    for (int32_t token : prompt) {
        emit(tokenizer.decode(prev, token));
        prev = token;
    }

    const SeqId seq = engine.new_sequence();
    auto record_cache = [&] {
        const KvCacheManager& cache = engine.cache();
        stats.kv_blocks_used = cache.pool().num_used();
        stats.kv_blocks_total = cache.pool().num_blocks();
        stats.kv_bytes_used = static_cast<size_t>(stats.kv_blocks_used) * engine.kv_bytes_per_block();
        stats.kv_bytes_total = static_cast<size_t>(stats.kv_blocks_total) * engine.kv_bytes_per_block();
    };
    try {
        auto start = std::chrono::steady_clock::now();
        const std::vector<float>* logits = &engine.forward({{seq, prompt, false}});
        stats.prefill_seconds = seconds_since(start);

        start = std::chrono::steady_clock::now();
        const auto& stops = options.stop_token_ids;
        int32_t next_token[1] = {0};
        const std::vector<SequenceInput> decode_step = {{seq, next_token, false}};  // reused: no allocation per token
        for (int64_t i = 0; i < max_new; ++i) {
            const int32_t next = sampler.sample(logits->data(), engine.vocab_size());
            if (std::find(stops.begin(), stops.end(), next) != stops.end()) break;
            emit(tokenizer.decode(prev, next));
            prev = next;
            ++stats.generated_tokens;
            if (i + 1 == max_new) break;  // the last token needs no forward pass
            next_token[0] = next;
            logits = &engine.forward(decode_step);
            ++stats.decode_steps;
        }
        stats.decode_seconds = seconds_since(start);
        record_cache();
    } catch (...) {
        engine.free_sequence(seq);
        throw;
    }
    engine.free_sequence(seq);
    return stats;
}

}  // namespace kvx
