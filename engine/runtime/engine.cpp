#include "engine/runtime/engine.h"

#include <algorithm>
#include <unordered_map>

#include "kernels/error.h"

namespace kvx {
namespace {

int32_t resolve_context(const ModelConfig& config, const EngineOptions& options) {
    if (options.context < 0) throw Error("context size must be positive");
    if (options.context > config.max_seq_len)
        throw Error("context of " + std::to_string(options.context) + " tokens exceeds the model's maximum of " +
                    std::to_string(config.max_seq_len));
    return options.context == 0 ? config.max_seq_len : options.context;
}

int32_t resolve_max_chunk(int32_t context, const EngineOptions& options) {
    if (options.max_chunk < 0) throw Error("the largest chunk of one forward pass must be positive");
    return options.max_chunk == 0 ? context : std::min(options.max_chunk, context);
}

// The pools of the model's layer groups. The full group gets num_blocks (default: one sequence of `context`
// tokens). A windowed group holds at most ceil((W - 1 + max_chunk) / block_size) + 1 blocks per sequence
// (docs/kv-cache.md), never more than the full context's blocks: its pool gets that for as many sequences
// as the full pool holds at full context.
std::vector<LayerGroupSpec> engine_groups(const ModelConfig& config, int32_t context, int32_t max_chunk,
                                          const EngineOptions& options) {
    if (options.num_blocks < 0) throw Error("the number of KV blocks must be positive");
    const int32_t bs = std::max(options.block_size, 1);  // a bad size is refused with the pools, not here
    const int32_t context_blocks = blocks_for(context, bs);
    const int32_t full_blocks = options.num_blocks > 0 ? options.num_blocks : context_blocks;
    const int32_t per_seq = std::min(context_blocks, blocks_for(int64_t{config.sliding_window} - 1 + max_chunk, bs) + 1);
    const int64_t sequences = std::max(1, full_blocks / std::max(context_blocks, 1));
    const auto window_blocks = static_cast<int32_t>(std::min<int64_t>(full_blocks, sequences * per_seq));
    std::vector<LayerGroupSpec> groups = layer_groups(config.n_layers, config.sliding_window,
                                                      config.sliding_window_layers, full_blocks, window_blocks);
    if (groups.empty()) groups.push_back({0, full_blocks, {}});  // a model without layers (tests' fakes)
    return groups;
}

// The pools are allocated (and a pool the backend cannot hold refused) before the cache's bookkeeping is built:
// that is sized by the block count too, and should not be what finds out that the count is absurd.
KvCacheGroups cache_after_pools(Backend& backend, const DecoderPlan& plan) {
    for (const LayerGroupSpec& group : plan.kv().groups)
        check_kv_cache_config({group.num_blocks, plan.kv().block_size, group.window});
    backend.allocate_kv(plan);
    return KvCacheGroups(plan.kv().block_size, plan.kv().groups);
}

// blocks_needed counts a copy for every sequence whose last, partly filled block is shared. Appended in one
// pass, the last holder to append finds the block no longer shared and writes in place, so a block that only
// sequences of this batch hold (beam search's children of one parent) costs one copy fewer than that count.
int64_t shared_tails_held_only_by(const KvCacheGroups& cache, const std::vector<SequenceInput>& inputs, size_t g) {
    const BlockPool& pool = cache.group(g).pool();
    std::unordered_map<int32_t, int32_t> holders;  // shared tail block -> inputs whose tail it is
    for (const SequenceInput& in : inputs) {
        if (cache.length(in.seq) % cache.block_size() == 0) continue;  // a full tail is not written again
        const int32_t tail = cache.block_table(in.seq, g).back();
        if (pool.ref_count(tail) > 1) ++holders[tail];
    }
    int64_t fewer = 0;
    for (const auto& [block, count] : holders) fewer += count == pool.ref_count(block) ? 1 : 0;
    return fewer;
}

}  // namespace

Engine::Engine(const ModelConfig& config, std::unique_ptr<Backend> backend, const EngineOptions& options)
    : backend_(std::move(backend)),
      context_(resolve_context(config, options)),
      max_chunk_(resolve_max_chunk(context_, options)),
      vocab_size_(config.vocab_size),
      plan_(config, engine_groups(config, context_, max_chunk_, options), options.block_size, options.kv_dtype),
      cache_(cache_after_pools(*backend_, plan_)) {}

std::vector<KvCacheUsage> Engine::cache_usage_by_group() const {
    std::vector<size_t> bytes;
    for (size_t g = 0; g < cache_.num_groups(); ++g) bytes.push_back(plan_.kv().bytes_per_block(g));
    return cache_.usage(bytes);
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
    const size_t n_logit_rows = prepare_batch(inputs);
    logits_.resize(n_logit_rows * static_cast<size_t>(vocab_size_));
    backend_->forward(batch_, logits_.data());
    return logits_;
}

int32_t Engine::forward_and_sample(const SequenceInput& input, Sampler& sampler) {
    if (input.all_logits) throw Error("internal: forward_and_sample wants one logit row");
    if (!backend_->can_sample(sampler.options())) return sampler.sample(forward({input}).data(), vocab_size_);
    prepare_batch({input});
    const double uniform = sampler.options().temperature == 0.0f ? 0.0 : sampler.next_uniform();
    return backend_->forward_sample(batch_, sampler.options(), uniform);
}

std::vector<int64_t> Engine::blocks_needed_by(const std::vector<SequenceInput>& inputs) const {
    std::vector<int64_t> needed(cache_.num_groups(), 0);
    for (size_t g = 0; g < needed.size(); ++g) {
        // A sequence whose window frees more than it takes cannot lend blocks to one appended before it.
        for (const SequenceInput& in : inputs)
            needed[g] += std::max(0, cache_.group(g).blocks_needed(in.seq, static_cast<int32_t>(in.tokens.size())));
        needed[g] -= shared_tails_held_only_by(cache_, inputs, g);
    }
    return needed;
}

bool Engine::pool_fits(const std::vector<SequenceInput>& inputs) const {
    const std::vector<int64_t> needed = blocks_needed_by(inputs);
    for (size_t g = 0; g < needed.size(); ++g)
        if (needed[g] > cache_.group(g).pool().num_available()) return false;
    return true;
}

size_t Engine::prepare_batch(const std::vector<SequenceInput>& inputs) {
    // Check everything before the cache changes, so that a refused batch leaves no trace.
    const size_t n_groups = cache_.num_groups();
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
        if (in.tokens.size() > static_cast<size_t>(max_chunk_))
            throw Error("an input of " + std::to_string(in.tokens.size()) + " tokens exceeds the engine's largest "
                        "chunk of " + std::to_string(max_chunk_) + " (feed it in chunks)");
        n_rows += in.tokens.size();
        n_logit_rows += in.all_logits ? in.tokens.size() : 1;
    }
    const std::vector<int64_t> blocks_needed = blocks_needed_by(inputs);
    for (size_t g = 0; g < n_groups; ++g) {
        const BlockPool& pool = cache_.group(g).pool();
        if (blocks_needed[g] > pool.num_available())
            throw Error("KV cache pool exhausted" +
                        (n_groups > 1 ? " in layer group " + std::to_string(g) : std::string()) + ": this step needs " +
                        std::to_string(blocks_needed[g]) + " blocks but " + std::to_string(pool.num_available()) +
                        " of " + std::to_string(pool.num_blocks()) + " are free");
    }

    ForwardBatch& b = batch_;
    b.tokens.clear();
    b.positions.clear();
    b.row_seq.clear();
    b.logit_rows.clear();
    b.groups.resize(n_groups);
    copies_.resize(n_groups);
    for (auto& group_copies : copies_) group_copies.clear();
    for (size_t g = 0; g < n_groups; ++g) {
        b.groups[g].window = cache_.spec(g).window;
        b.groups[g].slots.resize(n_rows);
    }
    auto count_copies = [&] {
        size_t n = 0;
        for (const auto& group_copies : copies_) n += group_copies.size();
        return n;
    };
    for (size_t i = 0; i < inputs.size(); ++i) {
        const SequenceInput& in = inputs[i];
        const int32_t start = cache_.length(in.seq);
        const size_t count = in.tokens.size(), first_row = b.tokens.size();
        seq_slots_.resize(n_groups * count);
        const size_t copies_before = count_copies();
        cache_.append_slots(in.seq, in.tokens, seq_slots_.data(), copies_);
        report(CacheEvent::Kind::append, in.seq, start, start + static_cast<int32_t>(count), -1,
               static_cast<int32_t>(count_copies() - copies_before));
        for (size_t g = 0; g < n_groups; ++g)  // [n_groups][count] -> each group's [n_rows]
            std::copy_n(seq_slots_.begin() + static_cast<std::ptrdiff_t>(g * count), count,
                        b.groups[g].slots.begin() + static_cast<std::ptrdiff_t>(first_row));
        for (size_t t = 0; t < count; ++t) {
            if (in.all_logits || t + 1 == count) b.logit_rows.push_back(static_cast<int32_t>(b.tokens.size()));
            b.tokens.push_back(in.tokens[t]);
            b.positions.push_back(start + static_cast<int32_t>(t));
            b.row_seq.push_back(static_cast<int32_t>(i));
        }
    }
    for (size_t g = 0; g < n_groups; ++g) {
        GroupRows& rows = b.groups[g];
        size_t stride = 1;
        for (const SequenceInput& in : inputs) stride = std::max(stride, cache_.block_table(in.seq, g).size());
        rows.table_stride = static_cast<int32_t>(stride);
        rows.block_tables.assign(inputs.size() * stride, -1);
        for (size_t i = 0; i < inputs.size(); ++i) {
            const auto& table = cache_.block_table(inputs[i].seq, g);
            std::copy(table.begin(), table.end(), rows.block_tables.begin() + static_cast<std::ptrdiff_t>(i * stride));
        }
    }

    if (std::any_of(copies_.begin(), copies_.end(), [](const auto& c) { return !c.empty(); }))
        backend_->copy_blocks(copies_);
    return n_logit_rows;
}

int32_t Backend::forward_sample(const ForwardBatch&, const SamplerOptions&, double) {
    throw Error("internal: the backend '" + name() + "' cannot sample where its logits are");
}

}  // namespace kvx
