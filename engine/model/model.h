// A converted model in memory: its config and pointers into the memory-mapped weights.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/files/gguf_file.h"
#include "engine/model/gguf_matrix.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weight_matrix.h"
#include "kernels/quant_matrix.h"

namespace kvx {

// A linear layer: y = x . weight^T + bias.
struct Linear {
    WeightMatrix weight;          // [out_features][in_features]
    const float* bias = nullptr;  // [out_features], or null for a layer without bias
};

// RMSNorm (weight only) or LayerNorm (weight and bias), as the family's traits say.
struct Norm {
    const float* weight = nullptr;  // [width]
    // [width], LayerNorm only: the file's "<name>_bias", or Model::zero_norm_bias where the file has none (a
    // LayerNorm without bias, Cohere's and OLMo's), so that the kernels take a bias without a branch.
    const float* bias = nullptr;
};

// One decoder layer. Tensor names in model.safetensors are in docs/model-format.md. The norms the config's
// placement leaves out (model_config.h's NormPlacement: no pre-norms with "post", post-norms only with
// "sandwich" and "post") and the q/k norms without qk_norm have null weights, never read.
struct LayerWeights {
    Norm attn_norm;       // [dim] before the attention block; pre and sandwich placements
    Norm post_attn_norm;  // [dim] on the attention block's output before the residual add; sandwich and post
    Norm q_norm;          // qk_norm: [head_dim] per head, or [n_heads * head_dim] for "projection"
    Norm k_norm;          // qk_norm: [head_dim] per head, or [n_kv_heads * head_dim] for "projection"
    Linear wq;      // [n_heads * head_dim][dim]
    Linear wk;      // [n_kv_heads * head_dim][dim]
    Linear wv;      // [n_kv_heads * head_dim][dim]
    Linear wo;      // [dim][n_heads * head_dim]
    Norm ffn_norm;  // [dim] before the MLP; pre and sandwich placements
    Linear w_gate;  // [hidden_dim][dim], a gated MLP's (SwiGLU) only, else empty
    Linear w_up;    // [hidden_dim][dim]; gpt2's c_fc
    Linear w_down;  // [dim][hidden_dim]; gpt2's c_proj
    Norm post_ffn_norm;  // [dim] on the MLP's output before the residual add; sandwich and post

    // The layer's matrices, for code that treats every one alike (an absent w_gate has a null weight).
    std::array<const Linear*, 7> linears() const { return {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down}; }
};

struct Model {
    std::string dir;  // the model folder, or the GGUF file
    ModelConfig config;
    // The mapping the pointers below point into: a model folder's weights file, or a GGUF file (gguf_model.h),
    // whose block matrices live in owned_weights instead, in kvx's layout, and whose computed or widened
    // vectors (RoPE frequencies, fp16 norms) live in owned_vectors. Exactly one of the two files is set.
    std::unique_ptr<SafetensorsFile> weights;
    std::unique_ptr<GgufFile> gguf;
    std::vector<OwnedBytes> owned_weights;
    std::vector<std::vector<float>> owned_vectors;
    WeightMatrix tok_embeddings;               // [vocab_size][dim]
    WeightMatrix pos_embeddings;               // [max_seq_len][dim], learned positions only
    const float* rope_inv_freq = nullptr;      // [rotary_dim / 2], rotary positions only
    const float* rope_inv_freq_local = nullptr;  // [rotary_dim / 2], for config.rope_local_layers only
    std::vector<LayerWeights> layers;          // [n_layers]
    Norm final_norm;                           // [dim], whatever the placement
    // The LM head: logits = x . classifier^T + classifier_bias (then config.logit_scale and the soft-cap).
    WeightMatrix classifier;                   // [vocab_size][dim]; the same data as tok_embeddings when tied
    const float* classifier_bias = nullptr;    // [vocab_size], optional in the file (Phi's, GPT-J's); tied or not
    // Norm weights with config.norm_weight_offset added (1 + w, in fp32 as HF computes it for Gemma), which
    // the Norms above point into instead of the mapping; empty for an offset of 0.
    std::vector<std::vector<float>> offset_norm_weights;
    // [dim] zeros: the bias of every LayerNorm whose file has no "<name>_bias"; empty for RMSNorm families. Sized
    // once before any Norm points into it (a move of the Model keeps its buffer).
    std::vector<float> zero_norm_bias;

    // Whether p lies in owned_weights: memory the model filled in kvx's layout, which a backend may read in
    // place rather than copy.
    bool owns(const void* p) const;
    // Gives back the pages of [p, p + bytes) in whichever file mapping holds them (MappedFile::release_pages):
    // for a backend that copied a matrix out of it. Memory the model owns is left alone.
    void release_pages(const void* p, size_t bytes) const;
};

// Whether any matrix of the model is q8 or q4.
bool model_has_quantized_matrix(const Model& model);

// How the model's matrices are stored, for the stats line: "f32", or e.g. "q4 block 32 (fp16 scales), f32
// embedding" when they differ. Each distinct storage once, the linear layers' first.
std::string weight_format(const Model& model);

// Loads a model folder (config.json + weights) or a GGUF file (gguf_model.h), whichever `path` is; throws
// kvx::Error on any mismatch between config and weights, including a tensor the architecture does not use.
// Defined in load_model.cpp, which picks the reader: each reader includes this header, not the other way.
// quant_layout: the layout the backend's kernels read quantized matrices fastest (KernelTable::matmul_q_layout);
// a GGUF's block matrices that fit it are laid out so once, at load time, and not copied again by the backend.
Model load_model(const std::string& path, QuantLayout quant_layout = QuantLayout::rows);

// The model folder's reader: config.json and model.safetensors.
Model load_model_folder(const std::string& model_dir);

// Throws kvx::Error naming the first tensor of the weights file that holds a NaN or an infinity, and how many.
// A full read of every weight (kvx --check-weights; the converter checks by default): a model that computes
// NaN otherwise runs and prints garbage.
void check_weights_finite(const Model& model);

}  // namespace kvx
