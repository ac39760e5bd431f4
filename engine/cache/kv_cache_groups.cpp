#include "engine/cache/kv_cache_groups.h"

#include <algorithm>
#include <string>

#include "kernels/error.h"

namespace kvx {

std::vector<LayerGroupSpec> layer_groups(int32_t n_layers, int32_t window, const std::vector<int32_t>& windowed_layers,
                                         int32_t full_blocks, int32_t window_blocks) {
    std::vector<bool> windowed(static_cast<size_t>(std::max(n_layers, 0)), false);
    for (int32_t layer : windowed_layers) {
        if (layer < 0 || layer >= n_layers)
            throw Error("sliding-window layer " + std::to_string(layer) + " is out of range for a model of " +
                        std::to_string(n_layers) + " layers");
        if (windowed[static_cast<size_t>(layer)])
            throw Error("sliding-window layer " + std::to_string(layer) + " is listed twice");
        windowed[static_cast<size_t>(layer)] = true;
    }
    if (!windowed_layers.empty() && window < 1)
        throw Error("sliding window of " + std::to_string(window) + " tokens is invalid for layers that use one");
    LayerGroupSpec full{0, full_blocks, {}}, local{window, window_blocks, {}};
    for (int32_t layer = 0; layer < n_layers; ++layer)
        (windowed[static_cast<size_t>(layer)] ? local : full).layers.push_back(layer);
    std::vector<LayerGroupSpec> groups;
    if (!full.layers.empty()) groups.push_back(full);
    if (!local.layers.empty()) groups.push_back(local);
    return groups;
}

KvCacheGroups::KvCacheGroups(int32_t block_size, std::vector<LayerGroupSpec> groups, BlockHashFn block_hash)
    : specs_(std::move(groups)) {
    if (specs_.empty()) throw Error("the KV cache needs at least one layer group");
    std::vector<int32_t> seen;
    for (const LayerGroupSpec& spec : specs_) {
        for (int32_t layer : spec.layers) {
            if (std::find(seen.begin(), seen.end(), layer) != seen.end())
                throw Error("layer " + std::to_string(layer) + " is in two KV cache groups");
            seen.push_back(layer);
        }
        groups_.emplace_back(KvCacheConfig{spec.num_blocks, block_size, spec.window, block_hash});
    }
}

std::vector<size_t> group_of_each_layer(const std::vector<LayerGroupSpec>& groups, int32_t n_layers) {
    const auto n = static_cast<size_t>(n_layers);
    std::vector<size_t> group(n, groups.size());
    for (size_t g = 0; g < groups.size(); ++g)
        for (int32_t layer : groups[g].layers) group.at(static_cast<size_t>(layer)) = g;
    for (size_t layer = 0; layer < n; ++layer)
        if (group[layer] == groups.size())
            throw Error("internal: layer " + std::to_string(layer) + " is in no KV cache group");
    return group;
}

size_t KvCacheGroups::group_of_layer(int32_t layer) const {
    for (size_t g = 0; g < specs_.size(); ++g)
        if (std::find(specs_[g].layers.begin(), specs_[g].layers.end(), layer) != specs_[g].layers.end()) return g;
    throw Error("layer " + std::to_string(layer) + " is in no KV cache group");
}

SeqId KvCacheGroups::same_id(const std::vector<SeqId>& ids) const {
    for (SeqId id : ids)
        if (id != ids.front()) throw Error("internal: KV cache groups gave one sequence different ids");
    return ids.front();
}

SeqId KvCacheGroups::create_sequence() {
    std::vector<SeqId> ids;
    for (KvCacheManager& m : groups_) ids.push_back(m.create_sequence());
    return same_id(ids);
}

SequenceStart KvCacheGroups::start_sequence(std::span<const int32_t> prompt) {
    // Each group's reusable prefix is a run from block 0 (the walk checks the chain from the start), so the
    // shortest one is reusable in all of them.
    int32_t n_blocks = groups_.front().cached_prefix_blocks(prompt);
    for (const KvCacheManager& m : groups_) n_blocks = std::min(n_blocks, m.cached_prefix_blocks(prompt));
    std::vector<SeqId> ids;
    for (KvCacheManager& m : groups_) ids.push_back(m.create_sequence(prompt, n_blocks));
    const SeqId seq = same_id(ids);
    return SequenceStart{seq, length(seq)};
}

SeqId KvCacheGroups::fork(SeqId parent) {
    std::vector<SeqId> ids;
    for (KvCacheManager& m : groups_) ids.push_back(m.fork(parent));
    return same_id(ids);
}

void KvCacheGroups::free_sequence(SeqId seq) {
    groups_.front().length(seq);  // throws for an unknown id before any group changes
    for (KvCacheManager& m : groups_) m.free_sequence(seq);
}

void KvCacheGroups::rewind_to(SeqId seq, int32_t n) {
    for (const KvCacheManager& m : groups_) m.check_rewind(seq, n);
    for (KvCacheManager& m : groups_) m.rewind_to(seq, n);
}

void KvCacheGroups::append_slots(SeqId seq, std::span<const int32_t> tokens, int64_t* slots_out,
                                 std::vector<std::vector<BlockCopy>>& copies) {
    const int32_t n = static_cast<int32_t>(tokens.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
        const int32_t needed = groups_[g].blocks_needed(seq, n);
        if (needed > groups_[g].pool().num_available())
            throw Error("KV cache pool exhausted in layer group " + std::to_string(g) + ": need " +
                        std::to_string(needed) + " more blocks but " + std::to_string(groups_[g].pool().num_available()) +
                        " of " + std::to_string(groups_[g].pool().num_blocks()) + " are free");
    }
    copies.resize(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g)
        groups_[g].append_slots(seq, tokens, slots_out + g * tokens.size(), copies[g]);
}

std::vector<KvCacheUsage> KvCacheGroups::usage(std::span<const size_t> bytes_per_block) const {
    if (bytes_per_block.size() != groups_.size())
        throw Error("internal: usage wants the block bytes of " + std::to_string(groups_.size()) + " layer groups");
    std::vector<KvCacheUsage> all;
    for (size_t g = 0; g < groups_.size(); ++g) all.push_back(groups_[g].usage(bytes_per_block[g]));
    return all;
}

void KvCacheGroups::check_invariants() const {
    auto fail = [](const std::string& what) { throw Error("KV cache invariant broken: " + what); };
    for (const KvCacheManager& m : groups_) m.check_invariants();
    const KvCacheManager& first = groups_.front();
    for (size_t g = 1; g < groups_.size(); ++g) {
        const KvCacheManager& m = groups_[g];
        if (m.sequence_ids() != first.sequence_ids())
            fail("layer group " + std::to_string(g) + " holds another set of sequences");
        for (SeqId seq : first.sequence_ids()) {
            const auto &mine = m.chain(seq), &theirs = first.chain(seq);
            const bool same_tokens = std::equal(mine.begin(), mine.end(), theirs.begin(), theirs.end(),
                                                [](const ChainLink& a, const ChainLink& b) { return a.hash == b.hash; });
            if (m.length(seq) != first.length(seq) || !same_tokens)
                fail("sequence " + std::to_string(seq) + " differs in layer group " + std::to_string(g));
        }
    }
}

}  // namespace kvx
