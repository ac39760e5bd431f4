// Sums across a warp and across a block, the two-level reduction of the norms: shuffles within each warp,
// then one warp over the warps' partial sums in shared memory.
#pragma once

namespace kvx::cuda {

constexpr unsigned kFullWarp = 0xffffffffu;

// Every lane gets the sum of v over the warp. All 32 lanes must be active.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarp, v, offset);
    return v;
}

// Shared memory block_sum needs: one partial per warp (at most 32) and the broadcast total.
constexpr int kBlockSumSlots = 33;

// Every thread gets the sum of v over the block. blockDim.x must be a multiple of 32 and every thread of the
// block must call it (it holds two barriers). partials [kBlockSumSlots] in shared memory may be reused by the
// next call at once: the warps' slots are read before the second barrier, and the total's slot is written
// only after every thread has passed the next call's first barrier.
__device__ __forceinline__ float block_sum(float v, float* partials) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int warp = static_cast<int>(threadIdx.x / 32);
    v = warp_sum(v);
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < static_cast<int>(blockDim.x / 32) ? partials[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) partials[32] = t;
    }
    __syncthreads();
    return partials[32];
}

}  // namespace kvx::cuda
