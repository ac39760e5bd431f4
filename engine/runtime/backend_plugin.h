// The interface of a backend plugin: a shared module exporting one C function that makes a Backend. The CUDA
// backend is one (libkvx_cuda_plugin.so, cuda/backend/cuda_plugin.cpp): kvx dlopen()s it only when --device
// cuda asks for it (tools/kvx/cuda_plugin_loader.cpp), so that a run on the CPU maps neither the CUDA runtime
// nor cuBLAS. The plugin holds its own copy of the engine libraries it needs, every symbol hidden but this
// entry point. The interface sits here, beside Backend, so that kvx includes no backend's header for it.
//
// A Backend made by the plugin crosses into kvx as a C++ object: kvx calls its virtual functions and deletes
// it, so both sides must agree on Backend, Model and what they hold. They are built from one source tree,
// but an install may pair a kvx with another build's plugin; kBackendPluginAbi is how the two notice.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvx {
class Backend;
struct Model;

// Raise it whenever Backend, Model (and what they hold) or the entry point's signature change.
inline constexpr uint32_t kBackendPluginAbi = 1;
// The CUDA plugin's entry point, a KvxCreateBackend.
inline constexpr const char kCudaPluginEntryPoint[] = "kvx_cuda_plugin_create_backend";

}  // namespace kvx

extern "C" {
// A new backend (the CUDA plugin's: a CudaBackend) over model, owned by the caller (deleted through Backend's virtual destructor), or null
// with a one-line reason in error (NUL-terminated, cut to error_capacity): another ABI than the plugin's, no
// usable GPU, a model the device cannot hold. The plugin must stay loaded while the backend lives.
using KvxCreateBackend = kvx::Backend* (*)(uint32_t abi, const kvx::Model* model, char* error,
                                                     size_t error_capacity);
}
