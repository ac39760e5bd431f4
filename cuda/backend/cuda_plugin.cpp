// The plugin's one exported function (cuda_plugin.h): kvx's only way into libkvx_cuda_plugin.so.
#include "engine/runtime/backend_plugin.h"

#include <cstdio>
#include <exception>
#include <string>
#include <type_traits>

#include "cuda/backend/cuda_backend.h"

namespace {

void write_error(const std::string& message, char* error, size_t capacity) {
    if (capacity > 0) std::snprintf(error, capacity, "%s", message.c_str());
}

}  // namespace

// No exception may leave through a C entry point: every failure becomes the reason string.
extern "C" __attribute__((visibility("default"))) kvx::Backend* kvx_cuda_plugin_create_backend(
        uint32_t abi, const kvx::Model* model, char* error, size_t error_capacity) {
    static_assert(std::is_same_v<decltype(&kvx_cuda_plugin_create_backend), KvxCreateBackend>);
    if (abi != kvx::kBackendPluginAbi) {
        write_error("--device cuda: the CUDA plugin is from another kvx build (plugin ABI " +
                    std::to_string(kvx::kBackendPluginAbi) + ", kvx's " + std::to_string(abi) +
                    "): install kvx and its plugin from one build", error, error_capacity);
        return nullptr;
    }
    try {
        return new kvx::cuda::CudaBackend(*model);
    } catch (const std::exception& e) {
        write_error(e.what(), error, error_capacity);
    } catch (...) {
        write_error("--device cuda: the CUDA backend failed with an unknown exception", error, error_capacity);
    }
    return nullptr;
}
