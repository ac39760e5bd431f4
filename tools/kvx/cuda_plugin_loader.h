// --device cuda's backend, from the CUDA plugin (engine/runtime/backend_plugin.h) that kvx loads only then. kvx
// itself links no CUDA library: the plugin brings the CUDA runtime and cuBLAS along when it is loaded.
#pragma once

#include <filesystem>
#include <memory>

#include "engine/model/model.h"
#include "engine/runtime/backend.h"

namespace kvx::cli {

// <folder of the running kvx>/KVX_CUDA_PLUGIN_FROM_BIN: build/lib/kvx/libkvx_cuda_plugin.so in the build tree,
// <prefix>/lib/kvx/libkvx_cuda_plugin.so in an install (the same layout, as data_dir.h's).
std::filesystem::path cuda_plugin_path();

// Loads the plugin, once per process; it stays loaded, as the backends it makes run its code. Throws
// kvx::Error when this kvx was built without it, or when it cannot be loaded (with dlerror's reason).
void load_cuda_plugin();

// A CUDA backend over model from the plugin (loaded first if need be). Throws kvx::Error with the plugin's
// reason: no usable GPU, the model does not fit, a plugin of another build.
std::unique_ptr<Backend> make_cuda_backend(const Model& model);

}  // namespace kvx::cli
