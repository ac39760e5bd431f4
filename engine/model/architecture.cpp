#include "engine/model/architecture.h"

namespace kvx {
namespace {

// Linear layers may carry biases in any family: the loader takes "<name>_bias" wherever the file has one.
constexpr ArchitectureTraits kArchitectures[] = {
    // Llama's layer (RMSNorm, RoPE, SwiGLU), the one most decoder families build on.
    {.name = "llama", .norm = NormKind::rms, .positions = PositionKind::rotary, .mlp = MlpKind::swiglu},
    {.name = "gpt2", .norm = NormKind::layer, .positions = PositionKind::learned, .mlp = MlpKind::gelu_tanh},
};

}  // namespace

const ArchitectureTraits* find_architecture(std::string_view name) {
    for (const ArchitectureTraits& a : kArchitectures)
        if (a.name == name) return &a;
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
