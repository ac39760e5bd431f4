// The decoder families kvx runs, as data. A family is a choice for each part of a layer; the weight loader
// (model.cpp) and the forward passes (cpu/backend/, cuda/backend/) read these choices, never a family's
// name, so a family built from parts kvx already computes is one row of engine/model/families.json, the
// table the converter reads too (tools/kvx_tools/convert/), embedded in kvx at build time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvx {

// The kinds kvx computes. families.json names them ("rms", "rotary", "swiglu", ...); a name there that is not
// one of these stops kvx at its first look at the table, naming it, rather than running a model wrongly.
enum class NormKind {
    rms,    // "rms", RMSNorm: x / sqrt(mean(x^2) + eps) * weight
    layer,  // "layer", LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias (a bias absent from the weights is 0)
};

enum class PositionKind {
    rotary,   // "rotary", RoPE on q and k ("rotate half"), inverse frequencies rope_inv_freq [rotary_dim / 2]
    learned,  // "learned", a learned table pos_embeddings [max_seq_len][dim] added to the token embedding
};

enum class MlpKind {
    swiglu,      // "swiglu", w_down(silu(w_gate x) * w_up x)
    gelu_tanh,   // "gelu_tanh", w_down(gelu_tanh(w_up x)), GPT-2's tanh form
    geglu_tanh,  // "geglu_tanh", w_down(gelu_tanh(w_gate x) * w_up x), Gemma's
    gelu_erf,    // "gelu", w_down(gelu(w_up x)) with the exact erf GELU, GPT-NeoX's
};

// The kind a name of families.json stands for (config.json's "norm", "positions", "mlp" overrides use the
// same names), or null for a name the table does not list.
const NormKind* find_norm_kind(std::string_view name);
const PositionKind* find_position_kind(std::string_view name);
const MlpKind* find_mlp_kind(std::string_view name);

// The names each find_*_kind knows, "rms, layer": for messages that list them.
std::string norm_kind_names();
std::string position_kind_names();
std::string mlp_kind_names();

struct ArchitectureTraits {
    std::string_view name;  // config.json's "architecture"; views the table's storage, which lives as long as kvx
    NormKind norm = NormKind::rms;
    PositionKind positions = PositionKind::rotary;
    MlpKind mlp = MlpKind::swiglu;

    bool norm_has_bias() const { return norm == NormKind::layer; }
    bool rotary() const { return positions == PositionKind::rotary; }
    bool learned_positions() const { return positions == PositionKind::learned; }
    bool gated_mlp() const { return mlp == MlpKind::swiglu || mlp == MlpKind::geglu_tanh; }
};

// The family config.json's "architecture" names, or null for a name kvx does not run. The first call of any
// function here parses the embedded table and throws kvx::Error when it names a kind kvx does not compute.
const ArchitectureTraits* find_architecture(std::string_view name);

// The names find_architecture knows, "llama, gpt2, ...", in the table's order: for messages that list them.
std::string architecture_names();

// Checks a families.json text as the embedded one is checked, and returns its architecture names in order:
// throws kvx::Error naming the entry that is malformed, names a kind kvx does not compute, or describes a kind
// other than kvx computes it (a gated MLP that is not, a norm's bias). For tests of the table's rules.
std::vector<std::string> check_families_json(std::string_view text);

}  // namespace kvx
