#include "engine/runtime/decoder_plan.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/error.h"

namespace kvx {

size_t KvLayout::block_elems() const {
    return static_cast<size_t>(n_kv_heads) * static_cast<size_t>(block_size) * static_cast<size_t>(head_dim);
}

size_t KvLayout::layer_pool_bytes(size_t layer) const {
    return block_bytes() * static_cast<size_t>(groups.at(layer_group.at(layer)).num_blocks);
}

size_t KvLayout::bytes_per_block(size_t group) const { return 2 * groups.at(group).layers.size() * block_bytes(); }

DecoderPlan::DecoderPlan(const ModelConfig& c, std::vector<LayerGroupSpec> groups, int32_t block_size, KvDtype kv_dtype)
    : n_heads_(c.n_heads), attention_scale_(c.q_k_scale()), attn_logit_softcap_(c.attn_logit_softcap) {
    kv_.dtype = kv_dtype;
    kv_.block_size = block_size;
    kv_.n_kv_heads = c.n_kv_heads;
    kv_.head_dim = c.head_dim;
    kv_.layer_group = group_of_each_layer(groups, c.n_layers);
    kv_.groups = std::move(groups);

    const auto dim = static_cast<size_t>(c.dim), hidden = static_cast<size_t>(c.hidden_dim);
    widths_.residual = dim;
    widths_.q = static_cast<size_t>(c.q_dim());
    widths_.kv = static_cast<size_t>(c.kv_dim());
    widths_.hidden = hidden;
    widths_.gate = c.traits.gated_mlp() ? hidden : 0;
    widths_.rope = c.traits.rotary() ? static_cast<size_t>(c.rotated_dims() / 2) : 0;
    widths_.rope_local = c.rope_local_layers.empty() ? 0 : widths_.rope;
    widths_.attn_out = c.parallel_residual ? dim : 0;
    widths_.widest_input = std::max({dim, hidden, widths_.q});
    widths_.logits = static_cast<size_t>(c.vocab_size);
}

PagedAttentionArgs DecoderPlan::attention_args(size_t layer, int32_t table_stride) const {
    PagedAttentionArgs a;
    a.n_heads = n_heads_;
    a.n_kv_heads = kv_.n_kv_heads;
    a.head_dim = kv_.head_dim;
    a.block_size = kv_.block_size;
    a.table_stride = table_stride;
    a.window = kv_.groups.at(kv_.layer_group.at(layer)).window;
    a.kv_dtype = kv_.dtype;
    a.scale = attention_scale_;
    a.softcap = attn_logit_softcap_;
    return a;
}

void DecoderPlan::check_batch(const ForwardBatch& batch) const {
    if (batch.groups.size() != kv_.groups.size()) throw Error("internal: the batch's layer groups are not the cache's");
}

const DecoderPlan& plan_for(const std::optional<DecoderPlan>& plan, const ForwardBatch& batch) {
    if (!plan) throw Error("internal: forward before allocate_kv");
    plan->check_batch(batch);
    return *plan;
}

}  // namespace kvx
