// A model's weights in device memory, uploaded once from the memory-mapped model in their stored dtype
// (quantized matrices as their integers, scales and offsets, in the file's layout).
// The structure mirrors engine/model/model.h with device pointers; a tensor used twice (tied embeddings) is
// uploaded once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "cuda/kernels/device_buffer.h"
#include "engine/model/model.h"

namespace kvx::cuda {

struct DeviceMatrix {
    const void* data = nullptr;  // [rows][cols] float, or fp16 bits when f16; quant.q when quantized
    bool f16 = false;
    bool quantized = false;      // q8 / q4: quant holds it
    QuantMatrix quant;           // quantized only: the host's QuantMatrix with device pointers (same layout)
    int rows = 0;
    int cols = 0;
};

struct DeviceLinear {
    DeviceMatrix weight;          // [out_features][in_features]
    const float* bias = nullptr;  // [out_features] or null
};

struct DeviceNorm {
    const float* weight = nullptr;  // [width]
    const float* bias = nullptr;    // [width], LayerNorm only (the model's zeros where its file has no bias)
};

// model.h's LayerWeights on the device; a norm the model's layers do not have has null pointers.
struct DeviceLayer {
    DeviceNorm attn_norm;                     // [dim], pre-norms (pre and sandwich placements)
    DeviceLinear wq, wk, wv, wo;
    DeviceNorm q_norm, k_norm;                // qk_norm only: [head_dim], or the projection's width
    DeviceNorm post_attn_norm;                // [dim], sandwich and post placements
    DeviceNorm ffn_norm;                      // [dim], pre-norms
    DeviceLinear w_gate, w_up, w_down;  // w_gate empty without a gated MLP
    DeviceNorm post_ffn_norm;                 // [dim], sandwich and post placements
};

class DeviceWeights {
public:
    // Throws kvx::Error naming the tensor when the device runs out of memory.
    explicit DeviceWeights(const Model& model);

    DeviceMatrix tok_embeddings;
    DeviceMatrix pos_embeddings;          // learned positions only
    const float* rope_inv_freq = nullptr; // [rotary_dim / 2], rotary positions only
    const float* rope_inv_freq_local = nullptr;  // [rotary_dim / 2], for config.rope_local_layers only
    std::vector<DeviceLayer> layers;
    DeviceNorm final_norm;
    DeviceMatrix classifier;              // [vocab_size][dim]
    const float* classifier_bias = nullptr;  // [vocab_size], or null for an LM head without bias

    size_t bytes() const { return bytes_; }
    // Elements (rows * cols) of the largest quantized matrix of a matrix product (a layer's or the
    // classifier), 0 without any: the size of the fp16 scratch a prefill dequantizes each into before
    // cublasGemmEx.
    size_t largest_quantized_elements() const { return largest_quantized_; }
    // Bytes one decode step reads: every matrix and vector except the embedding tables, of which it reads
    // only a row per token (the classifier counts even when tied to the embeddings).
    size_t bytes_read_per_step() const { return bytes_per_step_; }

private:
    const void* upload(const void* host, size_t bytes, const char* what);
    DeviceMatrix matrix(const WeightMatrix& w, const char* what);
    DeviceMatrix quantized_matrix(const WeightMatrix& w, const char* what);
    void note_product(const DeviceMatrix& w);
    const float* vector(const float* host, int n, const char* what);
    DeviceLinear linear(const Linear& l, const char* what);
    DeviceNorm norm(const Norm& n, int dim, const char* what);

    std::map<const void*, DeviceBuffer<std::byte>> tensors_;  // keyed by host pointer: tied tensors once
    size_t bytes_ = 0;
    size_t bytes_per_step_ = 0;
    size_t largest_quantized_ = 0;
};

}  // namespace kvx::cuda
