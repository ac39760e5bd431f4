// The engine: a backend, the cache that owns the block tables (one group of layers, or a full and a windowed
// group for a model with sliding-window layers: engine/cache/kv_cache_groups.h), and the context limit. It turns
// "these sequences get these tokens" into one ForwardBatch and returns the logits the caller asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/cache/kv_cache_groups.h"
#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cache_event.h"
#include "engine/runtime/decoder_plan.h"
#include "kernels/kernels.h"

namespace kvx {

struct EngineOptions {
    int32_t context = 0;       // most tokens one sequence may hold; 0 = the model's max_seq_len
    int32_t block_size = 16;   // tokens per KV block, a power of two from 1 to 256
    int32_t num_blocks = 0;    // pool size; 0 = enough for one sequence of `context` tokens
    // Most tokens one sequence appends in one forward pass; 0 = the context. A windowed layer group needs
    // ceil((W - 1 + max_chunk) / block_size) + 1 blocks per sequence, so a small max_chunk (prefill in
    // chunks) is what shrinks its pool below the full group's; forward refuses a longer input.
    int32_t max_chunk = 0;
    KvDtype kv_dtype = KvDtype::f32;  // what the cache stores: fp16 halves its memory and a decode step's reads
};

// New tokens for one sequence in a forward pass.
struct SequenceInput {
    SeqId seq;
    std::span<const int32_t> tokens;
    bool all_logits = false;  // logits for every token (kvx logits, tests) or only for the last one
};

class Engine {
public:
    // Builds the cache and the DecoderPlan that describes it, and has the backend allocate the pools. Throws
    // kvx::Error for an invalid block size, a context beyond the model's max_seq_len, or a pool the backend
    // cannot allocate.
    Engine(const ModelConfig& config, std::unique_ptr<Backend> backend, const EngineOptions& options);

    SeqId new_sequence() { return cache_.create_sequence(); }
    // A new sequence that reuses the K/V of the prompt's longest cached prefix of whole blocks (blocks other
    // sequences hold or held with the same tokens from position 0). Feed it prompt[cached_tokens..].
    SequenceStart start_sequence(std::span<const int32_t> prompt);
    SeqId fork_sequence(SeqId parent);
    void free_sequence(SeqId seq);
    // Forgets every token from position n on (speculative decoding's rejected drafts, an edited turn).
    // Logits are not cached: the next forward starts at position n, so sampling what follows token n - 1
    // means rewinding to n - 1 and feeding that token again.
    void rewind(SeqId seq, int32_t n);
    int32_t length(SeqId seq) const { return cache_.length(seq); }

    // Appends each input's tokens to its sequence in one forward pass and returns the wanted logits,
    // [rows][vocab_size] in input order: every token's row for all_logits inputs, else the last token's.
    // A sequence may appear at most once. Throws kvx::Error, with nothing changed, if a sequence would
    // outgrow the context or the pool is short of blocks.
    const std::vector<float>& forward(const std::vector<SequenceInput>& inputs);
    // Whether the pool has the blocks forward(inputs) would take (new blocks and copies on write, cached
    // blocks counting as available): a scheduler asks before a pass, and preempts a sequence when not.
    bool pool_fits(const std::vector<SequenceInput>& inputs) const;
    // Appends one input's tokens and returns the token the sampler picks after its last one. The backend
    // picks it where the logits are when it can (Backend::can_sample: on a GPU only the token then crosses
    // to the host); otherwise the logits come back and the sampler picks. Either way the same token.
    int32_t forward_and_sample(const SequenceInput& input, Sampler& sampler);

    // The first layer group's cache: the full-attention one when the model has full layers, the only one
    // without a window. Lengths and sequence ids are the same in every group.
    const KvCacheManager& cache() const { return cache_.group(0); }
    const KvCacheGroups& cache_groups() const { return cache_; }
    const Backend& backend() const { return *backend_; }
    const DecoderPlan& plan() const { return plan_; }
    int32_t context() const { return context_; }
    int32_t max_chunk() const { return max_chunk_; }
    int32_t vocab_size() const { return vocab_size_; }
    size_t kv_bytes_per_block() const { return plan_.kv().bytes_per_block(0); }  // the first group's
    KvCacheUsage cache_usage() const { return cache().usage(kv_bytes_per_block()); }  // the first group's
    std::vector<KvCacheUsage> cache_usage_by_group() const;
    // The copy-on-write copies the last forward pass ran, [n_groups] (one copy_blocks call): beam search counts them.
    const std::vector<std::vector<BlockCopy>>& last_copies() const { return copies_; }

    // Called after every cache operation (append, prefix hit, fork, rewind, free) with what it did; empty to
    // stop. Costs nothing when unset; a usage count per operation when set.
    void set_cache_observer(std::function<void(const CacheEvent&)> observer) { observer_ = std::move(observer); }

private:
    std::unique_ptr<Backend> backend_;
    int32_t context_;
    int32_t max_chunk_;
    int32_t vocab_size_;
    DecoderPlan plan_;                            // of cache_, as the backend was given it
    KvCacheGroups cache_;
    ForwardBatch batch_;                          // reused between calls
    std::vector<std::vector<BlockCopy>> copies_;  // [n_groups], reused between calls
    std::vector<int64_t> seq_slots_;              // [n_groups][tokens of one input], reused between calls
    std::vector<float> logits_;     // [rows][vocab_size], reused between calls
    std::function<void(const CacheEvent&)> observer_;

    // [n_groups] blocks the inputs' appends take from each group's pool, net of what windows release.
    std::vector<int64_t> blocks_needed_by(const std::vector<SequenceInput>& inputs) const;
    // Checks the inputs, appends them to the cache, runs the copy-on-write copies, and fills batch_;
    // returns the number of logit rows. Throws kvx::Error with nothing changed.
    size_t prepare_batch(const std::vector<SequenceInput>& inputs);
    void report(CacheEvent::Kind kind, SeqId seq, int32_t before, int32_t after, SeqId parent = -1, int32_t copies = 0);
};

}  // namespace kvx
