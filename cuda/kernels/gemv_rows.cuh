// What the two decode GEMVs (gemv.cu: fp32 / fp16 weights, gemv_quant.cu: q8 / q4) share: one warp per
// output row, each lane holding one fp32 accumulator per row of x, the kernel instantiated for kRows in
// {1, 2, 4, 8} (n rounded up, rows r >= n masked), and the epilogue that sums a warp's accumulators and writes
// the output row.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_reduce.cuh"
#include "cuda/kernels/launch_shape.h"

namespace kvx::cuda {

constexpr int kGemvWarpsPerBlock = 8;  // output rows per block
constexpr int kGemvThreads = kGemvWarpsPerBlock * 32;

// raw[u] = vectors[base + 32u] for the kUnroll vectors a lane streams at once (zero past n_vectors): all
// loaded before any is used, so that each lane has kUnroll independent 16-byte loads in flight.
template <int kUnroll>
__device__ __forceinline__ void load_vectors_in_flight(const uint4* vectors, int base, int n_vectors,
                                                       uint4 (&raw)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int v = base + 32 * u;
        raw[u] = v < n_vectors ? __ldg(vectors + v) : make_uint4(0, 0, 0, 0);
    }
}

// acc[r] += w[0 .. kCount) . x[r][p .. p + kCount) for r < n, x [n][k] read as float4s (16-byte aligned,
// k % 4 == 0). kStopAtK: a quantized vector may run past the end of a row of x into the weights' padding, so
// the float4s at or past k are skipped; gemv.cu's vectors never do, and the check would cost it registers
// (ptxas: 32 -> 39 for gemv_kernel<1, float>).
template <bool kStopAtK, int kRows, int kCount>
__device__ __forceinline__ void accumulate_vector(float (&acc)[kRows], const float (&w)[kCount], const float* x, int n,
                                                  int k, int p) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r >= n) break;
        const float4* xv = reinterpret_cast<const float4*>(x + static_cast<int64_t>(r) * k + p);
#pragma unroll
        for (int g = 0; g < kCount / 4; ++g) {
            if (kStopAtK && p + 4 * g >= k) break;
            const float4 xg = __ldg(xv + g);
            acc[r] += w[4 * g] * xg.x;
            acc[r] += w[4 * g + 1] * xg.y;
            acc[r] += w[4 * g + 2] * xg.z;
            acc[r] += w[4 * g + 3] * xg.w;
        }
    }
}

// acc[r] += w * x[r][p] for r < n: the scalar path's one weight against the rows of x [n][k].
template <int kRows>
__device__ __forceinline__ void accumulate_element(float (&acc)[kRows], float w, const float* x, int n, int k, int p) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r >= n) break;
        acc[r] += w * __ldg(x + static_cast<int64_t>(r) * k + p);
    }
}

// Every lane of the warp: acc[r] summed over the warp; lane 0 writes out[r][row] (+ bias[row], one fp32 add
// after the sum, as the reference's matmul followed by add_bias) for r < n. out [n][m].
template <int kRows>
__device__ __forceinline__ void gemv_store_row(float (&acc)[kRows], float* out, const float* bias, int n, int m,
                                               int row, int lane) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
    if (lane != 0) return;
    const float b = bias ? bias[row] : 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r >= n) break;
        out[static_cast<int64_t>(r) * m + row] = bias ? acc[r] + b : acc[r];
    }
}

// Host: checks n and the shape (kvx::Error naming `kernel`), then calls launch(rows) with rows a
// std::integral_constant<int, kRows>, kRows the instantiation for n, and blocks for m output rows. Returns
// false, launching nothing, when m is 0.
template <class Launch>
bool launch_gemv_rows(const char* kernel, int n, int k, int m, Launch launch) {
    require(n >= 1 && n <= kGemvMaxRows, kernel, "n (rows of x) must be in 1 .. kGemvMaxRows (8); larger n goes to cuBLAS");
    require(k >= 0 && m >= 0, kernel, "negative k or m");
    if (m == 0) return false;
    const auto blocks = static_cast<unsigned>((m + kGemvWarpsPerBlock - 1) / kGemvWarpsPerBlock);
    if (n == 1)
        launch(std::integral_constant<int, 1>{}, blocks);
    else if (n == 2)
        launch(std::integral_constant<int, 2>{}, blocks);
    else if (n <= 4)
        launch(std::integral_constant<int, 4>{}, blocks);
    else
        launch(std::integral_constant<int, 8>{}, blocks);
    return true;
}

}  // namespace kvx::cuda
