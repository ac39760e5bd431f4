// A model whose layers attend over different spans: full attention on some, a sliding window on others.
// Each layer group gets its own KvCacheManager, hence its own pool and block tables, and the groups move in
// lockstep: the same sequences, lengths and tokens, different blocks.
//
//   6 layers, window W = 8 on layers 0 1 2 4 5, full attention on layer 3; block size 4; length 19
//
//   group 0: full, layer 3              group 1: window 8, layers 0 1 2 4 5
//   pool A: a block = 1 layer's K/V      pool B: a block = 5 layers' K/V
//   table [ 4 | 9 | 2 | 11 | 6 ]         table [ -1 | -1 | -1 | 3 | 8 ]
//   grows with the sequence              at most ceil((W - 1 + chunk) / 4) + 1 blocks
//
// Why separate pools and tables rather than one table for all layers: a block id names the same slot range
// in every layer it serves. With one table, the full layer would keep every block alive and the windowed
// layers would pay for memory they never read; with one pool of all-layer blocks, every windowed block
// would carry the full layers' storage unused. Per-group pools make a block cost exactly its group's
// layers, and let the windowed group release its blocks (vLLM's hybrid allocator, ONNX Runtime GenAI's
// window ring, TensorRT-LLM's per-window pools make the same split). Tables keep positional indexing: a
// released entry is -1, and group g's attention over position p reads block table_g[p / block_size],
// starting at max(0, p - W_g + 1).
//
// Every operation is all-or-nothing across groups: appends check every pool before any changes, rewinds
// ask every group before any rewinds, and a prefix hit is the longest prefix every group can serve.
//
// The engine builds one from the model's config (sliding_window) and hands each group's slots, tables and
// window to the backend in ForwardBatch::groups; each layer reads its own group's (cpu/backend/cpu_backend.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/cache/kv_cache_manager.h"

namespace kvx {

struct LayerGroupSpec {
    int32_t window = 0;           // 0: full attention
    int32_t num_blocks = 0;       // this group's pool
    std::vector<int32_t> layers;  // the model layers that read this group's tables, ascending
};

// The groups of an n_layers model whose windowed_layers attend over `window` tokens and the rest over the
// whole sequence: a full group first (if any layer is full), then a windowed group (if any is windowed).
// Throws kvx::Error for a layer out of range or listed twice, or a window < 1 with layers to apply it to.
std::vector<LayerGroupSpec> layer_groups(int32_t n_layers, int32_t window, const std::vector<int32_t>& windowed_layers,
                                         int32_t full_blocks, int32_t window_blocks);

// [n_layers]: the index in `groups` of the group each layer belongs to, the lookup a backend makes per layer.
// Throws kvx::Error (internal) for a layer in no group or out of range.
std::vector<size_t> group_of_each_layer(const std::vector<LayerGroupSpec>& groups, int32_t n_layers);

class KvCacheGroups {
public:
    // Throws kvx::Error for no group, a layer in two groups, or what KvCacheManager refuses.
    KvCacheGroups(int32_t block_size, std::vector<LayerGroupSpec> groups, BlockHashFn block_hash = hash_block_tokens);

    size_t num_groups() const { return groups_.size(); }
    const LayerGroupSpec& spec(size_t g) const { return specs_.at(g); }
    const KvCacheManager& group(size_t g) const { return groups_.at(g); }
    size_t group_of_layer(int32_t layer) const;
    int32_t block_size() const { return groups_.front().block_size(); }

    SeqId create_sequence();
    SequenceStart start_sequence(std::span<const int32_t> prompt);  // the prefix every group has cached
    SeqId fork(SeqId parent);
    void free_sequence(SeqId seq);
    void rewind_to(SeqId seq, int32_t n);

    bool contains(SeqId seq) const { return groups_.front().contains(seq); }
    int32_t length(SeqId seq) const { return groups_.front().length(seq); }
    size_t num_sequences() const { return groups_.front().num_sequences(); }
    const std::vector<int32_t>& block_table(SeqId seq, size_t g) const { return groups_.at(g).block_table(seq); }

    // Appends tokens to the sequence in every group. slots_out is [num_groups][tokens.size()], row-major;
    // copies[g] receives group g's copy-on-write copies. Throws kvx::Error, with nothing changed in any
    // group, if some group's pool is short.
    void append_slots(SeqId seq, std::span<const int32_t> tokens, int64_t* slots_out,
                      std::vector<std::vector<BlockCopy>>& copies);

    // One entry per group; bytes_per_block[g] is what a block of group g costs (its layers' K and V).
    std::vector<KvCacheUsage> usage(std::span<const size_t> bytes_per_block) const;

    // Every group's invariants, plus lockstep: the same sequences with the same lengths and chains.
    void check_invariants() const;

private:
    SeqId same_id(const std::vector<SeqId>& ids) const;

    std::vector<LayerGroupSpec> specs_;
    std::vector<KvCacheManager> groups_;
};

}  // namespace kvx
