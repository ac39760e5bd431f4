#include "cuda_plugin_loader.h"

#include <array>
#include <dlfcn.h>
#include <string>

#include "engine/runtime/backend_plugin.h"
#include "data_dir.h"
#include "kernels/error.h"

namespace kvx::cli {
namespace {

// The plugin's factory once loaded; the handle is never closed (backends and the CUDA runtime outlive any
// point at which closing would be safe).
KvxCreateBackend loaded_factory = nullptr;

}  // namespace

std::filesystem::path cuda_plugin_path() {
    return (bin_dir() / KVX_CUDA_PLUGIN_FROM_BIN).lexically_normal();
}

void load_cuda_plugin() {
    if (loaded_factory) return;
    const std::filesystem::path path = cuda_plugin_path();
    if (!std::filesystem::exists(path))
        throw Error("--device cuda: this kvx was built without the CUDA backend (no " + path.string() +
                    "; it is built where nvcc is found, unless -DKVX_CUDA=OFF)");
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw Error("--device cuda: cannot load " + path.string() + ": " + dlerror());
    void* entry = dlsym(handle, kCudaPluginEntryPoint);
    if (!entry) {
        dlclose(handle);
        throw Error("--device cuda: " + path.string() + " is not kvx's CUDA plugin (no " +
                    kCudaPluginEntryPoint + ")");
    }
    loaded_factory = reinterpret_cast<KvxCreateBackend>(entry);
}

std::unique_ptr<Backend> make_cuda_backend(const Model& model) {
    load_cuda_plugin();
    std::array<char, 512> error{};
    Backend* backend = loaded_factory(kBackendPluginAbi, &model, error.data(), error.size());
    if (!backend) throw Error(error.data());
    return std::unique_ptr<Backend>(backend);
}

}  // namespace kvx::cli
