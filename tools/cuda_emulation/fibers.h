// Runs a grid of the emulated kernel `body` on the calling host thread: block after block, each block's
// threads as fibers (fibers.cpp). The launch checks and the stream the launch belongs to are runtime.cpp's.
#pragma once
#include <vector_types.h>

#include <cstddef>
#include <functional>

void emu_run_grid(const std::function<void()>& body, dim3 grid, dim3 block, size_t smem_bytes);
