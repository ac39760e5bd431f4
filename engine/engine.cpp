#include "engine/engine.h"

#include <algorithm>

#include "engine/error.h"

namespace kvx {
namespace {

int32_t resolve_context(const ModelConfig& config, const EngineOptions& options) {
    if (options.context < 0) throw Error("context size must be positive");
    if (options.context > config.max_seq_len)
        throw Error("context of " + std::to_string(options.context) + " tokens exceeds the model's maximum of " +
                    std::to_string(config.max_seq_len));
    return options.context == 0 ? config.max_seq_len : options.context;
}

int32_t resolve_num_blocks(int32_t context, const EngineOptions& options) {
    if (options.num_blocks < 0) throw Error("the number of KV blocks must be positive");
    if (options.num_blocks > 0) return options.num_blocks;
    return (context + options.block_size - 1) / std::max(options.block_size, 1);
}

}  // namespace

Engine::Engine(const ModelConfig& config, std::unique_ptr<Backend> backend, const EngineOptions& options)
    : backend_(std::move(backend)),
      context_(resolve_context(config, options)),
      vocab_size_(config.vocab_size),
      cache_(resolve_num_blocks(context_, options), options.block_size) {
    backend_->allocate_kv(cache_.pool().num_blocks(), cache_.block_size());
}

const char* cache_event_name(CacheEvent::Kind kind) {
    switch (kind) {
        case CacheEvent::Kind::append: return "append";
        case CacheEvent::Kind::prefix_hit: return "prefix hit";
        case CacheEvent::Kind::fork: return "fork";
        case CacheEvent::Kind::rewind: return "rewind";
        case CacheEvent::Kind::free: return "free";
    }
    return "?";
}

void Engine::report(CacheEvent::Kind kind, SeqId seq, int32_t before, int32_t after, SeqId parent, int32_t copies) {
    if (!observer_) return;
    CacheEvent e;
    e.kind = kind;
    e.seq = seq;
    e.parent = parent;
    e.length_before = before;
    e.length_after = after;
    e.copies = copies;
    e.usage = cache_usage();
    observer_(e);
}

SequenceStart Engine::start_sequence(std::span<const int32_t> prompt) {
    const SequenceStart start = cache_.start_sequence(prompt);
    report(CacheEvent::Kind::prefix_hit, start.seq, 0, start.cached_tokens);
    return start;
}

SeqId Engine::fork_sequence(SeqId parent) {
    const SeqId child = cache_.fork(parent);
    report(CacheEvent::Kind::fork, child, cache_.length(parent), cache_.length(child), parent);
    return child;
}

void Engine::free_sequence(SeqId seq) {
    const int32_t before = cache_.contains(seq) ? cache_.length(seq) : 0;
    cache_.free_sequence(seq);
    report(CacheEvent::Kind::free, seq, before, 0);
}

void Engine::rewind(SeqId seq, int32_t n) {
    const int32_t before = cache_.contains(seq) ? cache_.length(seq) : 0;
    cache_.rewind_to(seq, n);
    report(CacheEvent::Kind::rewind, seq, before, n);
}

const std::vector<float>& Engine::forward(const std::vector<SequenceInput>& inputs) {
    // Check everything before the cache changes, so that a refused batch leaves no trace.
    int64_t blocks_needed = 0;
    size_t n_rows = 0, n_logit_rows = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const SequenceInput& in = inputs[i];
        for (size_t j = 0; j < i; ++j)
            if (inputs[j].seq == in.seq) throw Error("a sequence appears twice in one forward pass");
        if (in.tokens.empty()) throw Error("a forward pass input has no tokens");
        for (int32_t token : in.tokens)
            if (token < 0 || token >= vocab_size_)
                throw Error("token id " + std::to_string(token) + " is outside the vocabulary of " +
                            std::to_string(vocab_size_));
        const int64_t new_len = int64_t{cache_.length(in.seq)} + static_cast<int64_t>(in.tokens.size());
        if (new_len > context_)
            throw Error("sequence would hold " + std::to_string(new_len) + " tokens, more than the context of " +
                        std::to_string(context_) + " (raise -c, up to the model's maximum)");
        // A sequence whose window frees more than it takes cannot lend blocks to one appended before it.
        blocks_needed += std::max(0, cache_.blocks_needed(in.seq, static_cast<int32_t>(in.tokens.size())));
        n_rows += in.tokens.size();
        n_logit_rows += in.all_logits ? in.tokens.size() : 1;
    }
    if (blocks_needed > cache_.pool().num_available())
        throw Error("KV cache pool exhausted: this step needs " + std::to_string(blocks_needed) + " blocks but " +
                    std::to_string(cache_.pool().num_available()) + " of " + std::to_string(cache_.pool().num_blocks()) +
                    " are free");

    ForwardBatch& b = batch_;
    b.tokens.clear();
    b.positions.clear();
    b.row_seq.clear();
    b.slots.resize(n_rows);
    b.logit_rows.clear();
    copies_.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
        const SequenceInput& in = inputs[i];
        const int32_t start = cache_.length(in.seq);
        const int32_t count = static_cast<int32_t>(in.tokens.size());
        const size_t copies_before = copies_.size();
        cache_.append_slots(in.seq, in.tokens, &b.slots[b.tokens.size()], copies_);
        report(CacheEvent::Kind::append, in.seq, start, start + count, -1,
               static_cast<int32_t>(copies_.size() - copies_before));
        for (int32_t t = 0; t < count; ++t) {
            if (in.all_logits || t == count - 1) b.logit_rows.push_back(static_cast<int32_t>(b.tokens.size()));
            b.tokens.push_back(in.tokens[static_cast<size_t>(t)]);
            b.positions.push_back(start + t);
            b.row_seq.push_back(static_cast<int32_t>(i));
        }
    }
    size_t stride = 1;
    for (const SequenceInput& in : inputs) stride = std::max(stride, cache_.block_table(in.seq).size());
    b.table_stride = static_cast<int32_t>(stride);
    b.block_tables.assign(inputs.size() * stride, -1);
    for (size_t i = 0; i < inputs.size(); ++i) {
        const auto& table = cache_.block_table(inputs[i].seq);
        std::copy(table.begin(), table.end(), b.block_tables.begin() + static_cast<std::ptrdiff_t>(i * stride));
    }

    if (!copies_.empty()) backend_->copy_blocks(copies_);
    logits_.resize(n_logit_rows * static_cast<size_t>(vocab_size_));
    backend_->forward(b, logits_.data());
    return logits_;
}

}  // namespace kvx
