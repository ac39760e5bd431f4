#include "engine/model/architecture.h"

#include <utility>

namespace kvx {
namespace {

// Linear layers may carry biases in any family: the loader takes "<name>_bias" wherever the file has one.
// A family row picks the kinds only; everything else that differs between families (norm weight offset,
// q/k norms, sandwich norms, parallel residual, rotary dims and per-layer bases, embedding scale, soft-caps,
// windows, attention scale) is a field of config.json (model_config.h), so Qwen 2/3, Mistral and Phi-3 are
// "llama" and Gemma 2/3 are "gemma" with their fields set.
constexpr ArchitectureTraits kArchitectures[] = {
    // Llama's layer (RMSNorm, RoPE, SwiGLU), the one most decoder families build on.
    {.name = "llama", .norm = NormKind::rms, .positions = PositionKind::rotary, .mlp = MlpKind::swiglu},
    {.name = "gpt2", .norm = NormKind::layer, .positions = PositionKind::learned, .mlp = MlpKind::gelu_tanh},
    {.name = "gemma", .norm = NormKind::rms, .positions = PositionKind::rotary, .mlp = MlpKind::geglu_tanh},
    {.name = "gpt-neox", .norm = NormKind::layer, .positions = PositionKind::rotary, .mlp = MlpKind::gelu_erf},
};

constexpr std::pair<std::string_view, MlpKind> kMlpKinds[] = {
    {"swiglu", MlpKind::swiglu},
    {"gelu_tanh", MlpKind::gelu_tanh},
    {"geglu_tanh", MlpKind::geglu_tanh},
    {"gelu", MlpKind::gelu_erf},
};

}  // namespace

const ArchitectureTraits* find_architecture(std::string_view name) {
    for (const ArchitectureTraits& a : kArchitectures)
        if (a.name == name) return &a;
    return nullptr;
}

const MlpKind* find_mlp_kind(std::string_view name) {
    for (const auto& [n, kind] : kMlpKinds)
        if (n == name) return &kind;
    return nullptr;
}

std::string architecture_names() {
    std::string names;
    for (const ArchitectureTraits& a : kArchitectures) {
        if (!names.empty()) names += ", ";
        names += a.name;
    }
    return names;
}

}  // namespace kvx
