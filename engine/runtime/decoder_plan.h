// What every backend needs to know about a model and its KV cache before it runs a forward pass, computed
// once, here, by the Engine, and handed to the backend (Backend::allocate_kv): the KV pools' layout and the
// bytes of a block, the width of each activation buffer, and the fixed fields of every layer's attention.
// The family's choices themselves (norm, positions, MLP) are ModelConfig::traits, which the plan's widths
// follow. The CPU and CUDA backends differ in where they put these numbers, never in the numbers, so a new
// cache option is an edit here, not in each backend. A new family built of traits kvx already computes costs
// nothing here: it is a row of engine/model/families.json (or only config.json's fields), and a matcher in the
// converter (tools/kvx_tools/convert/blocks/) where its export spells a part the matchers do not read yet. A
// new trait costs more: its kernel on each backend (an op of each backend's Ops), its step in the one forward
// recipe (engine/runtime/forward_recipe.h), and here the width of any buffer it adds.
//
// KV pools (one K and one V per layer, in the pool of the layer's group; engine/cache/kv_cache_groups.h):
//
//   layer l of group g:  k_pool[l]  [groups[g].num_blocks][n_kv_heads][block_size][head_dim]  of dtype
//                        v_pool[l]  the same
//
//   block_elems  = n_kv_heads * block_size * head_dim       one block of one layer's K (or V)
//   bytes_per_block(g) = 2 * |groups[g].layers| * block_elems * elem_bytes     K and V of the group's layers
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/cache/kv_cache_groups.h"
#include "engine/model/model_config.h"
#include "engine/runtime/forward_batch.h"
#include "kernels/kernels.h"

namespace kvx {

struct KvLayout {
    KvDtype dtype = KvDtype::f32;
    int32_t block_size = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    std::vector<LayerGroupSpec> groups;  // [n_groups], the cache's, in its order
    std::vector<size_t> layer_group;     // [n_layers] the group whose pool, slots and tables the layer uses

    size_t elem_bytes() const { return dtype == KvDtype::f16 ? 2 : 4; }
    size_t block_elems() const;
    size_t block_bytes() const { return block_elems() * elem_bytes(); }  // one block of one layer's K (or V)
    size_t layer_pool_bytes(size_t layer) const;                          // one layer's K (or V) pool
    size_t bytes_per_block(size_t group) const;
};

// Floats per batch row of each activation buffer a forward pass uses; 0 where the family has no such buffer.
struct ActivationWidths {
    size_t residual = 0;      // dim: the residual stream, its normalised copy, a projection's output
    size_t q = 0;             // n_heads * head_dim: queries, attention output
    size_t kv = 0;            // n_kv_heads * head_dim: new keys, new values
    size_t hidden = 0;        // hidden_dim: the MLP's inner activations
    size_t gate = 0;          // hidden_dim for a gated MLP (SwiGLU)
    size_t rope = 0;          // rotary_dim / 2 for rotary positions: each row's cos, and its sin
    size_t rope_local = 0;    // rotary_dim / 2 where some layers use the local RoPE base (Gemma 3)
    size_t attn_out = 0;      // dim for a parallel residual: the attention's output, kept until the MLP's joins it
    size_t widest_input = 0;  // the widest matmul input (dim, hidden_dim or q): a staging copy of any input
    size_t logits = 0;        // vocab_size
};

class DecoderPlan {
public:
    // groups and block_size are the cache's (KvCacheGroups), kv_dtype what its blocks store. Throws
    // kvx::Error (internal) for groups that leave a layer out.
    DecoderPlan(const ModelConfig& config, std::vector<LayerGroupSpec> groups, int32_t block_size, KvDtype kv_dtype);

    const KvLayout& kv() const { return kv_; }
    const ActivationWidths& widths() const { return widths_; }

    // Layer `layer`'s attention with every field but the pointers and n_rows set: heads, head_dim, block
    // size, KV dtype, the model's attention scale and logit soft-cap, its group's window, and the batch's
    // block table stride.
    PagedAttentionArgs attention_args(size_t layer, int32_t table_stride) const;

    // Throws kvx::Error (internal) for a batch the Engine did not build for this cache (other groups).
    void check_batch(const ForwardBatch& batch) const;

private:
    KvLayout kv_;
    ActivationWidths widths_;
    int32_t n_heads_ = 0;
    float attention_scale_ = 1.0f;
    float attn_logit_softcap_ = 0.0f;
};

// The plan a backend was handed, checked against the batch: throws kvx::Error (internal) when forward comes
// before allocate_kv or the batch is not for this cache.
const DecoderPlan& plan_for(const std::optional<DecoderPlan>& plan, const ForwardBatch& batch);

}  // namespace kvx
