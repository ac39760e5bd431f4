// The decoder's forward pass as a sequence of ops, written once for every backend.
//
// The recipe reads the family's traits (ModelConfig) and says, layer by layer, which op runs on which buffer;
// a backend says how each op runs (KernelTable calls on the CPU, launches on a CUDA stream) and keeps what is
// really its own: where buffers live, weight layouts, the embedding lookup and RoPE tables before the layers,
// the staging of the batch, graph capture. A new layer trait is one edit here plus its op in each backend's
// Ops; the two backends cannot drift apart in the order of their arithmetic.
//
// Data flow through one layer (buffers of ForwardBuffers; n = batch rows):
//
//   x ──(+ previous block's proj)──► norm ──► xn ─┬─► wq,wk,wv ─► q,k,v ─► clamp ─► q/k norm ─► RoPE
//                                                 │        ─► attention (K/V appended to the paged cache) ─► att
//                                                 │        ─► wo ─► post-norm ─► × residual_scale ─► proj
//   x ──(+ proj)──► norm ──► xn ──► w_up (, w_gate) ─► activation ─► up ─► w_down ─► post-norm ─► proj
//
// A block's output waits in proj and joins the residual stream x in the same step as the next block's norm
// (Ops::add_norm; a plain add where the layers have no pre-norms, and before the final norm), so a backend
// may fuse the two. A parallel residual (GPT-NeoX) norms the same x for both blocks and joins their sum.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <initializer_list>

#include "engine/model/model_config.h"

namespace kvx {

// The activations of one pass, each [n_rows][width] row-major fp32 in the backend's memory (host or device);
// widths are DecoderPlan::widths().
struct ForwardBuffers {
    float* x = nullptr;         // [n][dim] residual stream, the embeddings on entry
    float* xn = nullptr;        // [n][dim] a block's normalised input (pre-norms only)
    float* q = nullptr;         // [n][n_heads][head_dim]
    float* k = nullptr;         // [n][n_kv_heads][head_dim]
    float* v = nullptr;         // [n][n_kv_heads][head_dim]
    float* att = nullptr;       // [n][n_heads][head_dim] attention output before wo
    float* gate = nullptr;      // [n][hidden_dim] gated MLPs only
    float* up = nullptr;        // [n][hidden_dim] the MLP's inner activations
    float* proj = nullptr;      // [n][dim] a block's output before it joins x; the gathered logit rows at the end
    float* attn_out = nullptr;  // [n][dim] parallel residual only: the attention's output until the MLP's joins it
    const float* rope_cos = nullptr;        // [n][rotary_dim / 2] rotary positions only, from rope_inv_freq
    const float* rope_sin = nullptr;        // [n][rotary_dim / 2]
    const float* rope_cos_local = nullptr;  // [n][rotary_dim / 2] rope_local_layers only, from rope_inv_freq_local
    const float* rope_sin_local = nullptr;  // [n][rotary_dim / 2]
};

// What a backend's Ops provides. Shapes and arithmetic of each op are those of the same-named KernelTable
// kernel (kernels/kernels.h); Layer, Linear and NormWeights are the backend's own weight types (model.h's on
// the CPU, their device mirror on CUDA) with model.h's member names.
//   layer(l)                        the weights of layer l (attn_norm, wq .. wo, q_norm, k_norm, ffn_norm,
//                                   w_gate, w_up, w_down, post_attn_norm, post_ffn_norm)
//   final_norm(), classifier()      the final norm and the LM head (with its bias) as a Linear
//   linears({{out, linear}..}, x, n)  out = x . linear.weight^T + bias for each; one group shares x [n][cols]
//   norm(out, x, w, n)              the family's norm (RMSNorm or LayerNorm) over rows of dim; out may be x
//   add_norm(out, x, y, w, n)       x += y, then out = norm(x)
//   attention(l, n)                 layer l's K/V (buffers k, v) appended at the batch's slots, then paged
//                                   attention of q into att
//   gather_logit_rows(out, x, n_out)  out [n_out][dim] = the rows of x whose logits are wanted
//   rmsnorm clamp rope swiglu geglu_tanh gelu_tanh gelu_erf scale add softcap: KernelTable's, minus the table
template <class Ops>
concept ForwardOps = requires(Ops& ops, const Ops& c_ops, float* f, const float* cf, int i, int64_t n, float s) {
    typename Ops::Linear;
    typename Ops::LinearOutput;
    { c_ops.layer(i) };
    { c_ops.final_norm() };
    { c_ops.classifier() } -> std::convertible_to<typename Ops::Linear>;
    ops.linears({typename Ops::LinearOutput{f, c_ops.layer(i).wq}}, cf, i);
    ops.norm(f, cf, c_ops.final_norm(), i);
    ops.add_norm(f, f, cf, c_ops.final_norm(), i);
    ops.attention(i, i);
    ops.gather_logit_rows(f, cf, i);
    ops.rmsnorm(f, cf, cf, i, i, s);
    ops.clamp(f, n, s);
    ops.rope(f, cf, cf, i, i, i, i);
    ops.swiglu(f, cf, cf, n);
    ops.geglu_tanh(f, cf, cf, n);
    ops.gelu_tanh(f, cf, n);
    ops.gelu_erf(f, cf, n);
    ops.scale(f, n, s);
    ops.add(f, cf, n);
    ops.softcap(f, n, s);
};

namespace forward_recipe_detail {

// The input of the next block: with pre-norms its norm of x, after the previous block's output in proj joins x
// when join_proj; without pre-norms x itself, after the join.
template <ForwardOps Ops, class NormWeights>
const float* block_input(Ops& ops, const ModelConfig& c, const ForwardBuffers& b, const NormWeights& pre_norm,
                         bool join_proj, int n) {
    if (!c.pre_norms()) {
        if (join_proj) ops.add(b.x, b.proj, int64_t{n} * c.dim);
        return b.x;
    }
    if (join_proj)
        ops.add_norm(b.xn, b.x, b.proj, pre_norm, n);
    else
        ops.norm(b.xn, b.x, pre_norm, n);
    return b.xn;
}

// A block's output on its way to the residual stream: its post-norm (sandwich and post placements), then the
// residual scale (Granite).
template <ForwardOps Ops, class NormWeights>
void block_output(Ops& ops, const ModelConfig& c, float* out, const NormWeights& post_norm, int n) {
    if (c.post_norms()) ops.norm(out, out, post_norm, n);
    if (c.residual_scale != 1.0f) ops.scale(out, int64_t{n} * c.dim, c.residual_scale);
}

// out [n][dim] = the attention block's output from its input `in`: q, k, v (clamped where the model clips them,
// then RMS-normed per head or per projection where it says), RoPE with the layer's table over the rotated dims,
// attention over the paged cache, wo, and block_output.
template <ForwardOps Ops>
void attention_block(Ops& ops, const ModelConfig& c, const ForwardBuffers& b, int layer, const float* in, float* out,
                     int n) {
    const auto& w = ops.layer(layer);
    ops.linears({{b.q, w.wq}, {b.k, w.wk}, {b.v, w.wv}}, in, n);
    if (c.clip_qkv > 0) {
        ops.clamp(b.q, int64_t{n} * c.q_dim(), c.clip_qkv);
        ops.clamp(b.k, int64_t{n} * c.kv_dim(), c.clip_qkv);
        ops.clamp(b.v, int64_t{n} * c.kv_dim(), c.clip_qkv);
    }
    if (c.qk_norm != QkNorm::none) {  // rows of q_norm_width(), in place: a head each, or a whole projection each
        const int q_rows = n * (c.q_dim() / c.q_norm_width()), k_rows = n * (c.kv_dim() / c.k_norm_width());
        ops.rmsnorm(b.q, b.q, w.q_norm.weight, q_rows, c.q_norm_width(), c.norm_eps);
        ops.rmsnorm(b.k, b.k, w.k_norm.weight, k_rows, c.k_norm_width(), c.norm_eps);
    }
    if (c.traits.rotary()) {
        const bool local = std::binary_search(c.rope_local_layers.begin(), c.rope_local_layers.end(), layer);
        const float* cos = local ? b.rope_cos_local : b.rope_cos;
        const float* sin = local ? b.rope_sin_local : b.rope_sin;
        ops.rope(b.q, cos, sin, n, c.n_heads, c.head_dim, c.rotated_dims());
        ops.rope(b.k, cos, sin, n, c.n_kv_heads, c.head_dim, c.rotated_dims());
    }
    ops.attention(layer, n);
    ops.linears({{out, w.wo}}, b.att, n);
    block_output(ops, c, out, w.post_attn_norm, n);
}

// out [n][dim] = the MLP block's output from its input `in`, and block_output.
template <ForwardOps Ops>
void mlp_block(Ops& ops, const ModelConfig& c, const ForwardBuffers& b, int layer, const float* in, float* out, int n) {
    const auto& w = ops.layer(layer);
    const int64_t inner = int64_t{n} * c.hidden_dim;
    switch (c.traits.mlp) {
    case MlpKind::swiglu:
        ops.linears({{b.up, w.w_up}, {b.gate, w.w_gate}}, in, n);
        ops.swiglu(b.up, b.gate, b.up, inner);
        break;
    case MlpKind::geglu_tanh:
        ops.linears({{b.up, w.w_up}, {b.gate, w.w_gate}}, in, n);
        ops.geglu_tanh(b.up, b.gate, b.up, inner);
        break;
    case MlpKind::gelu_tanh:
        ops.linears({{b.up, w.w_up}}, in, n);
        ops.gelu_tanh(b.up, b.up, inner);
        break;
    case MlpKind::gelu_erf:
        ops.linears({{b.up, w.w_up}}, in, n);
        ops.gelu_erf(b.up, b.up, inner);
        break;
    }
    ops.linears({{out, w.w_down}}, b.up, n);
    block_output(ops, c, out, w.post_ffn_norm, n);
}

}  // namespace forward_recipe_detail

// Every layer over b.x (the embeddings of n rows), then logits [n_out][vocab_size] of the n_out rows
// gather_logit_rows picks: the final norm, the LM head, the logit scale and the soft-cap. Only those rows go
// through the classifier, the largest matrix of a small model.
template <ForwardOps Ops>
void run_forward_recipe(Ops& ops, const ModelConfig& c, const ForwardBuffers& b, int n, int n_out, float* logits) {
    using namespace forward_recipe_detail;
    const int64_t width = int64_t{n} * c.dim;
    for (int layer = 0; layer < c.n_layers; ++layer) {
        const auto& w = ops.layer(layer);
        const float* in = block_input(ops, c, b, w.attn_norm, layer > 0, n);
        if (c.parallel_residual) {
            // x + (mlp(ffn_norm(x)) + attn(attn_norm(x))), HF GPT-NeoX's order of adds: both norms of the same
            // x, the sum of the two outputs joining x at the next block_input.
            attention_block(ops, c, b, layer, in, b.attn_out, n);
            mlp_block(ops, c, b, layer, block_input(ops, c, b, w.ffn_norm, false, n), b.proj, n);
            ops.add(b.proj, b.attn_out, width);
            continue;
        }
        attention_block(ops, c, b, layer, in, b.proj, n);
        mlp_block(ops, c, b, layer, block_input(ops, c, b, w.ffn_norm, true, n), b.proj, n);
    }
    if (c.n_layers > 0) ops.add(b.x, b.proj, width);

    ops.gather_logit_rows(b.proj, b.x, n_out);
    ops.norm(b.xn, b.proj, ops.final_norm(), n_out);
    const typename Ops::Linear classifier = ops.classifier();
    ops.linears({{logits, classifier}}, b.xn, n_out);
    const int64_t n_logits = int64_t{n_out} * c.vocab_size;
    if (c.logit_scale != 1.0f) ops.scale(logits, n_logits, c.logit_scale);
    if (c.final_logit_softcap > 0) ops.softcap(logits, n_logits, c.final_logit_softcap);
}

}  // namespace kvx
