#include "cuda/backend/device_weights.h"

#include <algorithm>
#include <string>

#include "kernels/error.h"
#include "kernels/quant_matrix.h"

namespace kvx::cuda {
namespace {

// Bytes of w as uploaded.
size_t stored_bytes(const WeightMatrix& w) {
    if (!w.quantized()) return static_cast<size_t>(w.rows * w.cols) * (w.dtype == WeightDtype::f16 ? 2 : 4);
    return quant_table_bytes(w.quant, w.rows).total();
}

}  // namespace

DeviceWeights::DeviceWeights(const Model& model) {
    const ModelConfig& c = model.config;
    tok_embeddings = matrix(model.tok_embeddings, "token embeddings");
    if (c.traits.learned_positions()) pos_embeddings = matrix(model.pos_embeddings, "position embeddings");
    if (c.traits.rotary()) {
        rope_inv_freq = vector(model.rope_inv_freq, c.rotated_dims() / 2, "rope_inv_freq");
        rope_inv_freq_local = vector(model.rope_inv_freq_local, c.rotated_dims() / 2, "rope_inv_freq_local");
    }
    const size_t embedding_bytes = bytes_;
    layers.reserve(model.layers.size());
    for (const LayerWeights& w : model.layers) {
        DeviceLayer& d = layers.emplace_back();
        d.attn_norm = norm(w.attn_norm, c.dim, "attention norm");
        d.wq = linear(w.wq, "wq");
        d.wk = linear(w.wk, "wk");
        d.wv = linear(w.wv, "wv");
        d.wo = linear(w.wo, "wo");
        // Absent norms (null host weights) stay null here: vector() uploads nothing for them.
        d.q_norm = norm(w.q_norm, c.q_norm_width(), "q norm");
        d.k_norm = norm(w.k_norm, c.k_norm_width(), "k norm");
        d.post_attn_norm = norm(w.post_attn_norm, c.dim, "post-attention norm");
        d.ffn_norm = norm(w.ffn_norm, c.dim, "ffn norm");
        if (c.traits.gated_mlp()) d.w_gate = linear(w.w_gate, "w_gate");
        d.w_up = linear(w.w_up, "w_up");
        d.w_down = linear(w.w_down, "w_down");
        d.post_ffn_norm = norm(w.post_ffn_norm, c.dim, "post-feedforward norm");
    }
    final_norm = norm(model.final_norm, c.dim, "final norm");
    classifier = matrix(model.classifier, "classifier");
    note_product(classifier);
    classifier_bias = vector(model.classifier_bias, c.vocab_size, "classifier bias");
    bytes_per_step_ = bytes_ - embedding_bytes;
    if (model.classifier.data == model.tok_embeddings.data)  // tied: uploaded once, read in full every step
        bytes_per_step_ += stored_bytes(model.classifier);
}

const void* DeviceWeights::upload(const void* host, size_t bytes, const char* what) {
    if (auto it = tensors_.find(host); it != tensors_.end()) return it->second.data();
    DeviceBuffer<std::byte> buffer;
    try {
        buffer.resize(bytes);
    } catch (const Error& e) {
        throw Error(std::string("cannot upload the model to the GPU: ") + what + " (" + std::to_string(bytes) +
                    " bytes) does not fit after " + std::to_string(bytes_) + " bytes of weights: " + e.what());
    }
    check(cudaMemcpy(buffer.data(), host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
    bytes_ += bytes;
    return tensors_.emplace(host, std::move(buffer)).first->second.data();
}

DeviceMatrix DeviceWeights::matrix(const WeightMatrix& w, const char* what) {
    if (w.quantized()) return quantized_matrix(w, what);
    DeviceMatrix d;
    d.f16 = w.dtype == WeightDtype::f16;
    d.rows = static_cast<int>(w.rows);
    d.cols = static_cast<int>(w.cols);
    d.data = upload(w.data, stored_bytes(w), what);
    return d;
}

// The tables uploaded as they are stored (the kernels read the file's layout), each its own allocation, so
// each is aligned for its type and q for the GEMV's 16-byte loads.
DeviceMatrix DeviceWeights::quantized_matrix(const WeightMatrix& w, const char* what) {
    const QuantTableBytes b = quant_table_bytes(w.quant, w.rows);
    DeviceMatrix d;
    d.quantized = true;
    d.rows = static_cast<int>(w.rows);
    d.cols = static_cast<int>(w.cols);
    d.quant = w.quant;
    d.quant.q = static_cast<const uint8_t*>(upload(w.quant.q, b.q, what));
    d.quant.scales = upload(w.quant.scales, b.scales, what);
    d.quant.offsets = b.offsets ? upload(w.quant.offsets, b.offsets, what) : nullptr;
    d.quant.scale_bases = b.scale_bases ? static_cast<const uint16_t*>(upload(w.quant.scale_bases, b.scale_bases, what)) : nullptr;
    d.quant.min_bases = b.min_bases ? static_cast<const uint16_t*>(upload(w.quant.min_bases, b.min_bases, what)) : nullptr;
    d.data = d.quant.q;
    return d;
}

// The embedding tables are only gathered from (a row per token); what goes through a matrix product sizes
// the prefill's dequantization scratch.
void DeviceWeights::note_product(const DeviceMatrix& w) {
    if (w.quantized)
        largest_quantized_ = std::max(largest_quantized_, static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols));
}

const float* DeviceWeights::vector(const float* host, int n, const char* what) {
    if (!host) return nullptr;
    return static_cast<const float*>(upload(host, static_cast<size_t>(n) * sizeof(float), what));
}

DeviceLinear DeviceWeights::linear(const Linear& l, const char* what) {
    DeviceLinear d;
    d.weight = matrix(l.weight, what);
    note_product(d.weight);
    d.bias = vector(l.bias, d.weight.rows, what);
    return d;
}

DeviceNorm DeviceWeights::norm(const Norm& n, int dim, const char* what) {
    return DeviceNorm{vector(n.weight, dim, what), vector(n.bias, dim, what)};
}

}  // namespace kvx::cuda
