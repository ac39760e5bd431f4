// A converted model in memory: its config and pointers into the memory-mapped weights.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace kvx {

// Linear weights are [out_features][in_features], row-major (docs/model-format.md).
struct LayerWeights {
    const float* attn_norm;  // [dim]
    const float* wq;         // [n_heads * head_dim][dim]
    const float* wk;         // [n_kv_heads * head_dim][dim]
    const float* wv;         // [n_kv_heads * head_dim][dim]
    const float* wo;         // [dim][n_heads * head_dim]
    const float* ffn_norm;   // [dim]
    const float* w_gate;     // [hidden_dim][dim]
    const float* w_up;       // [hidden_dim][dim]
    const float* w_down;     // [dim][hidden_dim]
};

struct Model {
    std::string dir;
    ModelConfig config;
    std::unique_ptr<SafetensorsFile> weights;  // owns the mapping every pointer below points into
    const float* tok_embeddings = nullptr;     // [vocab_size][dim]
    const float* rope_inv_freq = nullptr;      // [head_dim / 2]
    std::vector<LayerWeights> layers;          // [n_layers]
    const float* final_norm = nullptr;         // [dim]
    const float* classifier = nullptr;         // [vocab_size][dim]; == tok_embeddings when tied
};

// Loads MODEL_DIR (config.json + weights); throws kvx::Error on any mismatch between the two.
Model load_model(const std::string& model_dir);

}  // namespace kvx
