#include "cpu/backend/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "engine/runtime/forward_recipe.h"
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
    // Asked before allocating: the pools' pages are taken as they are first written, so a pool larger than the
    // memory left would not fail cleanly but have the system kill kvx (or swap) once the context fills.
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
        } catch (const Error&) {
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

// The recipe's ops (engine/runtime/forward_recipe.h) on the host: calls into the backend's KernelTable, on its
// weight copies and KV pools, for one batch.
class CpuBackend::Ops {
public:
    using Linear = kvx::Linear;
    struct LinearOutput {
        float* out;           // [n_rows][layer.weight.rows]
        const Linear& layer;
    };

    Ops(CpuBackend& backend, const ForwardBatch& batch)
        : b_(backend), k_(backend.kernels_), c_(backend.model_.config), batch_(batch) {}

    const LayerWeights& layer(int l) const { return b_.model_.layers[static_cast<size_t>(l)]; }
    const Norm& final_norm() const { return b_.model_.final_norm; }
    Linear classifier() const { return {b_.model_.classifier, b_.model_.classifier_bias}; }

    // Each output of the group as one matmul would compute it, in one kernel call for the group, so that a
    // decode step wakes the threads once for, say, q, k and v instead of once per projection.
    void linears(std::initializer_list<LinearOutput> group, const float* x, int n) {
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
            part.w_f32 = w.dtype == WeightDtype::f32 ? static_cast<const float*>(b_.weights_.data(w)) : nullptr;
            part.w_f16_groups = w.dtype == WeightDtype::f16 ? b_.weights_.f16_groups(w) : nullptr;
            part.w_f16 = w.dtype == WeightDtype::f16 && !part.w_f16_groups
                             ? static_cast<const uint16_t*>(b_.weights_.data(w))
                             : nullptr;
            part.w_q = w.quantized() ? &b_.weights_.quant(w) : nullptr;
        }
        k_.matmuls(parts.data(), static_cast<int>(count), x, n, k);
        for (const LinearOutput& o : group)
            if (o.layer.bias) k_.add_bias(o.out, o.layer.bias, n, static_cast<int>(o.layer.weight.rows));
    }

    void norm(float* out, const float* x, const Norm& w, int n) {
        if (c_.traits.norm == NormKind::rms)
            k_.rmsnorm(out, x, w.weight, n, c_.dim, c_.norm_eps);
        else
            k_.layernorm(out, x, w.weight, w.bias, n, c_.dim, c_.norm_eps);
    }
    void add_norm(float* out, float* x, const float* y, const Norm& w, int n) {
        k_.add(x, y, int64_t{n} * c_.dim);
        norm(out, x, w, n);
    }

    // The layer's new K/V (buffers k, v) into its group's pool at the batch's slots, then paged attention of
    // q into att.
    void attention(int layer, int n) {
        const DecoderPlan& plan = *b_.plan_;
        const KvLayout& kv = plan.kv();
        const GroupRows& rows = batch_.groups[kv.layer_group[static_cast<size_t>(layer)]];
        std::byte* k_cache = reinterpret_cast<std::byte*>(b_.k_cache_[static_cast<size_t>(layer)].data());
        std::byte* v_cache = reinterpret_cast<std::byte*>(b_.v_cache_[static_cast<size_t>(layer)].data());
        if (kv.dtype == KvDtype::f16)
            k_.kv_append_f16(reinterpret_cast<uint16_t*>(k_cache), reinterpret_cast<uint16_t*>(v_cache), b_.k_.data(),
                             b_.v_.data(), rows.slots.data(), n, c_.n_kv_heads, c_.head_dim, kv.block_size);
        else
            k_.kv_append(reinterpret_cast<float*>(k_cache), reinterpret_cast<float*>(v_cache), b_.k_.data(),
                         b_.v_.data(), rows.slots.data(), n, c_.n_kv_heads, c_.head_dim, kv.block_size);

        PagedAttentionArgs a = plan.attention_args(static_cast<size_t>(layer), rows.table_stride);
        a.q = b_.q_.data();
        a.k_cache = k_cache;
        a.v_cache = v_cache;
        a.block_tables = rows.block_tables.data();
        a.row_seq = batch_.row_seq.data();
        a.row_pos = batch_.positions.data();
        a.out = b_.att_.data();
        a.n_rows = n;
        k_.paged_attention(a);
    }

    void gather_logit_rows(float* out, const float* x, int n_out) {
        const size_t dim = static_cast<size_t>(c_.dim);
        for (size_t i = 0; i < static_cast<size_t>(n_out); ++i)
            std::memcpy(&out[i * dim], &x[static_cast<size_t>(batch_.logit_rows[i]) * dim], dim * sizeof(float));
    }

    void rmsnorm(float* out, const float* x, const float* w, int n, int d, float eps) { k_.rmsnorm(out, x, w, n, d, eps); }
    void clamp(float* x, int64_t n, float c) { k_.clamp(x, n, c); }
    void rope(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim, int rotary_dim) {
        k_.rope(x, cos, sin, n_rows, n_heads, head_dim, rotary_dim);
    }
    void swiglu(float* out, const float* gate, const float* up, int64_t n) { k_.swiglu(out, gate, up, n); }
    void geglu_tanh(float* out, const float* gate, const float* up, int64_t n) { k_.geglu_tanh(out, gate, up, n); }
    void gelu_tanh(float* out, const float* x, int64_t n) { k_.gelu_tanh(out, x, n); }
    void gelu_erf(float* out, const float* x, int64_t n) { k_.gelu_erf(out, x, n); }
    void scale(float* x, int64_t n, float s) { k_.scale(x, n, s); }
    void add(float* x, const float* y, int64_t n) { k_.add(x, y, n); }
    void softcap(float* x, int64_t n, float cap) { k_.softcap(x, n, cap); }

private:
    static constexpr size_t kMaxLinearGroup = 3;  // q, k and v
    CpuBackend& b_;
    const KernelTable& k_;
    const ModelConfig& c_;
    const ForwardBatch& batch_;
};

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
    const int32_t n = batch.n_rows();
    ensure_scratch(n);
    embed(batch);
    ForwardBuffers buffers;
    buffers.x = x_.data();
    buffers.xn = xn_.data();
    buffers.q = q_.data();
    buffers.k = k_.data();
    buffers.v = v_.data();
    buffers.att = att_.data();
    buffers.gate = gate_.data();
    buffers.up = up_.data();
    buffers.proj = proj_.data();
    buffers.attn_out = attn_out_.data();
    buffers.rope_cos = rope_cos_.data();
    buffers.rope_sin = rope_sin_.data();
    buffers.rope_cos_local = rope_cos_local_.data();
    buffers.rope_sin_local = rope_sin_local_.data();
    Ops ops(*this, batch);
    run_forward_recipe(ops, model_.config, buffers, n, static_cast<int>(batch.logit_rows.size()), logits);
}

}  // namespace kvx::cpu
