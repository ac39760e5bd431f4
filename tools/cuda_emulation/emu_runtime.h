// What the emulated runtime's parts share: the order of work on a stream (run at once, or recorded while the
// stream is captured into a graph) and the registry of device allocations the copies are checked against.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

// Runs `work` now (every stream is in order on the host, so "enqueued" is "done"), or appends it to the graph
// the stream is capturing. `what` names the call in the error a forbidden capture gives.
cudaError_t emu_enqueue(cudaStream_t stream, std::function<void()> work);

// Whether [p, p + bytes) lies inside one live cudaMalloc allocation.
bool emu_is_device(const void* p, size_t bytes);
// Aborts, naming `what`, unless [p, p + bytes) is device memory.
void emu_require_device(const void* p, size_t bytes, const char* what);
// Aborts, naming `what`, if any byte of [p, p + bytes) is device memory (a host pointer was expected).
void emu_require_host(const void* p, size_t bytes, const char* what);
