// Host-side helpers the launch functions share: argument checks that name the kernel, and grid sizes for
// grid-stride loops (gridDim.x stays far below its 2^31 - 1 limit; the loop covers the rest).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/error.h"

namespace kvx::cuda {

// Throws kvx::Error "KERNEL: WHAT" unless ok.
inline void require(bool ok, const char* kernel, const char* what) {
    if (!ok) throw Error(std::string(kernel) + ": " + what);
}

// Blocks of `threads` threads for a grid-stride loop over `items` (> 0) items: enough to cover them once,
// at most kMaxGridStrideBlocks (many times what any GPU runs at once).
constexpr int64_t kMaxGridStrideBlocks = 1 << 16;
inline unsigned grid_stride_blocks(int64_t items, int threads) {
    return static_cast<unsigned>(std::min((items + threads - 1) / threads, kMaxGridStrideBlocks));
}

// Threads for one block per row of `items` items: a whole number of warps, between 32 and max_threads.
inline int row_block_threads(int64_t items, int max_threads) {
    const int64_t warps = std::clamp<int64_t>((items + 31) / 32, 1, max_threads / 32);
    return static_cast<int>(warps * 32);
}

}  // namespace kvx::cuda
