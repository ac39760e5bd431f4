#include "cpu/backend/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "kernels/error.h"

namespace kvx::cpu {
namespace {

// MemAvailable of /proc/meminfo (memory the system can give without swapping), else all physical memory.
size_t available_memory_bytes() {
    std::ifstream meminfo("/proc/meminfo");
    for (std::string key; meminfo >> key;) {
        size_t kib = 0;
        if (key == "MemAvailable:" && meminfo >> kib) return kib * 1024;
        meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    return static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(::sysconf(_SC_PAGE_SIZE));
}

// kernels, once checked to have every kernel the model needs: throws kvx::Error naming the first it lacks.
const KernelTable& checked_kernels(const Model& model, const KernelTable& kernels) {
    const ArchitectureTraits& t = model.config.traits;
    const bool f16 = model.config.weights_dtype == WeightDtype::f16;
    const std::pair<bool, const char*> needs[] = {
        {f16 && !kernels.matmul_f16, "matmul_f16 (fp16 weights)"},
        {model_has_quantized_matrix(model) && !kernels.matmul_q, "matmul_q (quantized weights)"},
        {!kernels.matmuls, "matmuls"},
        {t.norm == NormKind::layer && !kernels.layernorm, "layernorm"},
        {t.mlp == MlpKind::gelu_tanh && !kernels.gelu_tanh, "gelu_tanh"},
        {t.mlp == MlpKind::geglu_tanh && !kernels.geglu_tanh, "geglu_tanh"},
        {t.mlp == MlpKind::gelu_erf && !kernels.gelu_erf, "gelu_erf"},
        {model.config.final_logit_softcap > 0 && !kernels.softcap, "softcap"},
        {model.config.clip_qkv > 0 && !kernels.clamp, "clamp"},
        {(model.config.residual_scale != 1.0f || model.config.logit_scale != 1.0f) && !kernels.scale, "scale"},
        {!kernels.add_bias, "add_bias"},
    };
    for (const auto& [missing, what] : needs)
        if (missing) throw Error(std::string("the kernel table '") + kernels.name + "' has no " + what + " kernel");
    return kernels;
}

}  // namespace

CpuBackend::CpuBackend(const Model& model, const KernelTable& kernels)
    : model_(model), kernels_(checked_kernels(model, kernels)), weights_(model, kernels) {}

void CpuBackend::allocate_kv(const DecoderPlan& plan) {
    const KvLayout& kv = plan.kv();
    if (kv.dtype == KvDtype::f16 && !kernels_.kv_append_f16)
        throw Error(std::string("the kernel table '") + kernels_.name + "' has no kv_append_f16 (fp16 KV cache) kernel");
    // Asked before allocating: the pools are zero-filled, so a pool larger than the memory left would not fail
    // cleanly but have the system kill kvx (or swap) as the pages are touched.
    size_t total = 0;  // saturating: a thousand layers of 2^59-byte pools do not wrap to a small number
    for (size_t layer = 0; layer < kv.layer_group.size(); ++layer)
        total = std::min(total + 2 * kv.layer_pool_bytes(layer), std::numeric_limits<size_t>::max() / 4);
    if (const size_t available = available_memory_bytes(); total > available)
        throw Error("the KV cache needs " + std::to_string(total) + " bytes, more than the " + std::to_string(available) +
                    " bytes of memory available (lower -c, or use --kv-dtype f16)");
    plan_ = plan;
    k_cache_.clear();
    v_cache_.clear();
    for (size_t layer = 0; layer < kv.layer_group.size(); ++layer) {
        try {
            k_cache_.emplace_back(kv.layer_pool_bytes(layer));
            v_cache_.emplace_back(kv.layer_pool_bytes(layer));
        } catch (const std::bad_alloc&) {
            const size_t g = kv.layer_group[layer];
            throw Error("cannot allocate the KV cache: " + std::to_string(kv.groups[g].num_blocks) + " blocks of " +
                        std::to_string(kv.bytes_per_block(g)) + " bytes (lower -c)");
        }
    }
}

// The manager's copies never write a block another copy reads (each dst is freshly allocated, each src still
// shared), as the kernel requires. Group g's copies name g's blocks, in g's layers only.
void CpuBackend::copy_blocks(std::span<const std::vector<BlockCopy>> copies) {
    const KvLayout& kv = plan_.value().kv();
    for (size_t layer = 0; layer < k_cache_.size(); ++layer) {
        const std::vector<BlockCopy>& mine = copies[kv.layer_group[layer]];
        if (mine.empty()) continue;
        kernels_.copy_blocks(k_cache_[layer].data(), v_cache_[layer].data(), mine.data(), static_cast<int>(mine.size()),
                             static_cast<int64_t>(kv.block_elems()), static_cast<int>(kv.elem_bytes()));
    }
}

void CpuBackend::ensure_scratch(int32_t n_rows) {
    if (n_rows <= scratch_rows_) return;
    const ActivationWidths& w = plan_->widths();
    const size_t n = static_cast<size_t>(n_rows);
    x_.resize(n * w.residual);
    xn_.resize(n * w.residual);
    q_.resize(n * w.q);
    k_.resize(n * w.kv);
    v_.resize(n * w.kv);
    att_.resize(n * w.q);
    gate_.resize(n * w.gate);
    up_.resize(n * w.hidden);
    proj_.resize(n * w.residual);
    pos_row_.resize(w.residual);
    attn_out_.resize(n * w.attn_out);
    rope_cos_.resize(n * w.rope);
    rope_sin_.resize(n * w.rope);
    rope_cos_local_.resize(n * w.rope_local);
    rope_sin_local_.resize(n * w.rope_local);
    scratch_rows_ = n_rows;
}

// The input of a block: norm(x) into xn_ where the layers have pre-norms, else x itself (post placement).
const float* CpuBackend::block_input(const Norm& pre_norm, int32_t n) {
    if (!model_.config.pre_norms()) return x_.data();
    norm(xn_.data(), x_.data(), pre_norm, n);
    return xn_.data();
}

// A block's output on its way to the residual stream: its post-norm (sandwich and post placements), then the
// residual scale.
void CpuBackend::block_output(float* out, const Norm& post_norm, int32_t n) {
    const ModelConfig& c = model_.config;
    if (c.post_norms()) norm(out, out, post_norm, n);
    if (c.residual_scale != 1.0f) kernels_.scale(out, int64_t{n} * c.dim, c.residual_scale);
}

// out [n_rows][dim] = the attention block's output for the residual stream: attention of the block's input
// (q, k and v clamped where the model clips them, q/k normed per head or per projection where it says, RoPE
// with the layer's base), through wo, and block_output's post-norm and scale.
void CpuBackend::attention_block(int layer, const ForwardBatch& batch, float* out) {
    const ModelConfig& c = model_.config;
    const DecoderPlan& plan = *plan_;
    const LayerWeights& w = model_.layers[static_cast<size_t>(layer)];
    const int32_t n = batch.n_rows();
    const float* in = block_input(w.attn_norm, n);
    linears({{q_.data(), w.wq}, {k_.data(), w.wk}, {v_.data(), w.wv}}, in, n);
    if (c.clip_qkv > 0) {
        kernels_.clamp(q_.data(), int64_t{n} * c.q_dim(), c.clip_qkv);
        kernels_.clamp(k_.data(), int64_t{n} * c.kv_dim(), c.clip_qkv);
        kernels_.clamp(v_.data(), int64_t{n} * c.kv_dim(), c.clip_qkv);
    }
    if (c.qk_norm != QkNorm::none) {  // rows of q_norm_width(): a head each, or a whole projection each
        const int q_rows = n * (c.q_dim() / c.q_norm_width()), k_rows = n * (c.kv_dim() / c.k_norm_width());
        kernels_.rmsnorm(q_.data(), q_.data(), w.q_norm.weight, q_rows, c.q_norm_width(), c.norm_eps);
        kernels_.rmsnorm(k_.data(), k_.data(), w.k_norm.weight, k_rows, c.k_norm_width(), c.norm_eps);
    }
    if (c.traits.rotary()) {
        const bool local = std::binary_search(c.rope_local_layers.begin(), c.rope_local_layers.end(), layer);
        const float* cos = local ? rope_cos_local_.data() : rope_cos_.data();
        const float* sin = local ? rope_sin_local_.data() : rope_sin_.data();
        kernels_.rope(q_.data(), cos, sin, n, c.n_heads, c.head_dim, c.rotated_dims());
        kernels_.rope(k_.data(), cos, sin, n, c.n_kv_heads, c.head_dim, c.rotated_dims());
    }

    const KvLayout& kv = plan.kv();
    const GroupRows& rows = batch.groups[kv.layer_group[static_cast<size_t>(layer)]];
    std::byte* k_cache = k_cache_[static_cast<size_t>(layer)].data();
    std::byte* v_cache = v_cache_[static_cast<size_t>(layer)].data();
    if (kv.dtype == KvDtype::f16)
        kernels_.kv_append_f16(reinterpret_cast<uint16_t*>(k_cache), reinterpret_cast<uint16_t*>(v_cache), k_.data(),
                               v_.data(), rows.slots.data(), n, c.n_kv_heads, c.head_dim, kv.block_size);
    else
        kernels_.kv_append(reinterpret_cast<float*>(k_cache), reinterpret_cast<float*>(v_cache), k_.data(), v_.data(),
                           rows.slots.data(), n, c.n_kv_heads, c.head_dim, kv.block_size);

    PagedAttentionArgs a = plan.attention_args(static_cast<size_t>(layer), rows.table_stride);
    a.q = q_.data();
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.block_tables = rows.block_tables.data();
    a.row_seq = batch.row_seq.data();
    a.row_pos = batch.positions.data();
    a.out = att_.data();
    a.n_rows = n;
    kernels_.paged_attention(a);

    linear(out, att_.data(), w.wo, n);
    block_output(out, w.post_attn_norm, n);
}

// out [n_rows][dim] = the MLP block's output: the MLP of the block's input, and block_output's post-norm
// and scale.
void CpuBackend::mlp_block(int layer, int32_t n, float* out) {
    const ModelConfig& c = model_.config;
    const LayerWeights& w = model_.layers[static_cast<size_t>(layer)];
    const int64_t inner = int64_t{n} * c.hidden_dim;
    const float* in = block_input(w.ffn_norm, n);
    switch (c.traits.mlp) {
    case MlpKind::swiglu:
        linears({{up_.data(), w.w_up}, {gate_.data(), w.w_gate}}, in, n);
        kernels_.swiglu(up_.data(), gate_.data(), up_.data(), inner);
        break;
    case MlpKind::geglu_tanh:
        linears({{up_.data(), w.w_up}, {gate_.data(), w.w_gate}}, in, n);
        kernels_.geglu_tanh(up_.data(), gate_.data(), up_.data(), inner);
        break;
    case MlpKind::gelu_tanh:
        linear(up_.data(), in, w.w_up, n);
        kernels_.gelu_tanh(up_.data(), up_.data(), inner);
        break;
    case MlpKind::gelu_erf:
        linear(up_.data(), in, w.w_up, n);
        kernels_.gelu_erf(up_.data(), up_.data(), inner);
        break;
    }
    linear(out, up_.data(), w.w_down, n);
    block_output(out, w.post_ffn_norm, n);
}

// out [n_rows][weight.rows] = x [n_rows][weight.cols] . weight^T (+ bias), in the weight's stored dtype.
void CpuBackend::linear(float* out, const float* x, const Linear& layer, int32_t n) {
    linears({{out, layer}}, x, n);
}

// Each output of the group as linear would compute it: one kernel call for the group, so a decode step
// wakes the threads once for, say, q, k and v instead of once per projection.
void CpuBackend::linears(std::initializer_list<LinearOutput> group, const float* x, int32_t n) {
    std::array<MatmulPart, kMaxLinearGroup> parts;
    if (group.size() > parts.size()) throw Error("internal: a linear group larger than kMaxLinearGroup");
    int k = 0;
    size_t count = 0;
    for (const LinearOutput& o : group) {
        const WeightMatrix& w = o.layer.weight;
        if (count > 0 && w.cols != k) throw Error("internal: a linear group's weights differ in input width");
        k = static_cast<int>(w.cols);
        MatmulPart& part = parts[count++];
        part.out = o.out;
        part.m = static_cast<int>(w.rows);
        part.w_f32 = w.dtype == WeightDtype::f32 ? static_cast<const float*>(weights_.data(w)) : nullptr;
        part.w_f16_groups = w.dtype == WeightDtype::f16 ? weights_.f16_groups(w) : nullptr;
        part.w_f16 = w.dtype == WeightDtype::f16 && !part.w_f16_groups ? static_cast<const uint16_t*>(weights_.data(w)) : nullptr;
        part.w_q = w.quantized() ? &weights_.quant(w) : nullptr;
    }
    kernels_.matmuls(parts.data(), static_cast<int>(count), x, n, k);
    for (const LinearOutput& o : group)
        if (o.layer.bias) kernels_.add_bias(o.out, o.layer.bias, n, static_cast<int>(o.layer.weight.rows));
}

void CpuBackend::norm(float* out, const float* x, const Norm& weights, int32_t n) {
    const ModelConfig& c = model_.config;
    if (c.traits.norm == NormKind::rms)
        kernels_.rmsnorm(out, x, weights.weight, n, c.dim, c.norm_eps);
    else
        kernels_.layernorm(out, x, weights.weight, weights.bias, n, c.dim, c.norm_eps);
}

// x [n_rows][dim] = the token's embedding (+ its position's embedding, for learned positions). Rotary
// models get each row's cos/sin instead, shared by all layers: angle = position * inv_freq in fp32, as the
// ONNX graph computes it.
void CpuBackend::embed(const ForwardBatch& batch) {
    const ModelConfig& c = model_.config;
    const int32_t n = batch.n_rows();
    const size_t dim = static_cast<size_t>(c.dim);
    for (int32_t r = 0; r < n; ++r) {
        const int32_t token = batch.tokens[static_cast<size_t>(r)];  // range-checked by the engine
        float* row = &x_[static_cast<size_t>(r) * dim];
        model_.tok_embeddings.row_to_f32(token, row);
        // HF multiplies the embedding by the scale as a tensor of the activations' dtype: fp32 here.
        if (c.embedding_scale != 1.0f)
            for (size_t i = 0; i < dim; ++i) row[i] *= c.embedding_scale;
    }
    if (c.traits.learned_positions()) {
        for (int32_t r = 0; r < n; ++r) {  // positions < context <= max_seq_len, checked by the engine
            model_.pos_embeddings.row_to_f32(batch.positions[static_cast<size_t>(r)], pos_row_.data());
            kernels_.add(&x_[static_cast<size_t>(r) * dim], pos_row_.data(), c.dim);
        }
        return;
    }
    rope_tables(batch, model_.rope_inv_freq, rope_cos_.data(), rope_sin_.data());
    if (model_.rope_inv_freq_local)
        rope_tables(batch, model_.rope_inv_freq_local, rope_cos_local_.data(), rope_sin_local_.data());
}

// cos, sin [n_rows][rotary_dim / 2] of each row's position times inv_freq.
void CpuBackend::rope_tables(const ForwardBatch& batch, const float* inv_freq, float* cos, float* sin) {
    const int32_t n = batch.n_rows();
    const int half = model_.config.rotated_dims() / 2;
    for (int32_t r = 0; r < n; ++r)
        for (int i = 0; i < half; ++i) {
            const float angle = static_cast<float>(batch.positions[static_cast<size_t>(r)]) * inv_freq[i];
            cos[static_cast<size_t>(r * half + i)] = std::cos(angle);
            sin[static_cast<size_t>(r * half + i)] = std::sin(angle);
        }
}

void CpuBackend::forward(const ForwardBatch& batch, float* logits) {
    plan_for(plan_, batch);
    const ModelConfig& c = model_.config;
    const int32_t n = batch.n_rows();
    ensure_scratch(n);
    embed(batch);
    const int64_t width = int64_t{n} * c.dim;
    for (int layer = 0; layer < c.n_layers; ++layer) {
        if (c.parallel_residual) {  // x + (mlp(ffn_norm(x)) + attn(attn_norm(x))), HF GPT-NeoX's order of adds
            attention_block(layer, batch, attn_out_.data());
            mlp_block(layer, n, proj_.data());
            kernels_.add(proj_.data(), attn_out_.data(), width);
            kernels_.add(x_.data(), proj_.data(), width);
            continue;
        }
        attention_block(layer, batch, proj_.data());
        kernels_.add(x_.data(), proj_.data(), width);
        mlp_block(layer, n, proj_.data());
        kernels_.add(x_.data(), proj_.data(), width);
    }

    // Only the rows whose logits are wanted go through the final norm and the classifier, the largest
    // matrix of a small model.
    const size_t dim = static_cast<size_t>(c.dim);
    const int32_t n_out = static_cast<int32_t>(batch.logit_rows.size());
    for (int32_t i = 0; i < n_out; ++i)
        std::memcpy(&proj_[static_cast<size_t>(i) * dim], &x_[static_cast<size_t>(batch.logit_rows[static_cast<size_t>(i)]) * dim],
                    dim * sizeof(float));
    norm(xn_.data(), proj_.data(), model_.final_norm, n_out);
    linear(logits, xn_.data(), Linear{model_.classifier, model_.classifier_bias}, n_out);
    const int64_t n_logits = int64_t{n_out} * c.vocab_size;
    if (c.logit_scale != 1.0f) kernels_.scale(logits, n_logits, c.logit_scale);
    if (c.final_logit_softcap > 0) kernels_.softcap(logits, n_logits, c.final_logit_softcap);
}

}  // namespace kvx::cpu
