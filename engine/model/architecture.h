// The decoder families kvx runs, as data. A family is a choice for each part of a layer; the weight loader
// (model.cpp) and the forward passes (cpu/backend/, cuda/backend/) read these choices, never a family's
// name, so a family built from parts kvx already computes is one row of the table in architecture.cpp.
#pragma once

#include <string>
#include <string_view>

namespace kvx {

enum class NormKind {
    rms,    // RMSNorm: x / sqrt(mean(x^2) + eps) * weight
    layer,  // LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias
};

enum class PositionKind {
    rotary,   // RoPE on q and k ("rotate half"), inverse frequencies stored as rope_inv_freq [head_dim / 2]
    learned,  // a learned table pos_embeddings [max_seq_len][dim] added to the token embedding
};

enum class MlpKind {
    swiglu,      // w_down(silu(w_gate x) * w_up x)
    gelu_tanh,   // w_down(gelu_tanh(w_up x)), GPT-2's tanh form
    geglu_tanh,  // w_down(gelu_tanh(w_gate x) * w_up x), Gemma's
    gelu_erf,    // w_down(gelu(w_up x)) with the exact erf GELU, GPT-NeoX's
};

// config.json's name of an MLP kind ("swiglu", "gelu_tanh", "geglu_tanh", "gelu"), or null for another name.
const MlpKind* find_mlp_kind(std::string_view name);

struct ArchitectureTraits {
    std::string_view name;  // config.json's "architecture"; views the table's static storage
    NormKind norm = NormKind::rms;
    PositionKind positions = PositionKind::rotary;
    MlpKind mlp = MlpKind::swiglu;

    bool norm_has_bias() const { return norm == NormKind::layer; }
    bool rotary() const { return positions == PositionKind::rotary; }
    bool learned_positions() const { return positions == PositionKind::learned; }
    bool gated_mlp() const { return mlp == MlpKind::swiglu || mlp == MlpKind::geglu_tanh; }
};

// The family config.json's "architecture" names, or null for a name kvx does not run.
const ArchitectureTraits* find_architecture(std::string_view name);

// The names find_architecture knows, "llama, gpt2, ...": for messages that list them.
std::string architecture_names();

}  // namespace kvx
