// The decode GEMV over quantized weights: out [n][m] = x [n][k] . dequantize(w) [m][k]^T (+ bias [m]) for
// 1 <= n <= kGemvMaxRows, w a q8 or q4 QuantMatrix (kernels/quant_matrix.h) of m rows and k columns.
//
// Buffers (device memory)
//   out   fp32 [n][m], row-major
//   x     fp32 [n][k], row-major (k = cols: x has no padding)
//   w.q   [m][row_bytes], row_bytes = padded_cols * bits / 8; q8 int8 in element order, q4 nibbles in 32-groups
//   w.scales, w.offsets  [m][n_blocks], n_blocks = padded_cols / block (fp32, fp16 or int8 multipliers of
//                        w.scale_bases, w.min_bases [m][ceil(padded_cols / 256)] fp16; int8 / uint8 zero points)
//   bias  fp32 [m] or null
//
// Why its own kernel rather than dequantize + gemv_f16: a decode step is bound by the bytes of w, and q4 is a
// quarter of fp16's. The weights are dequantized in registers as they stream in and never stored.
//
// Thread mapping: gemv.cu's (gemv_rows.cuh). One warp per output row (kGemvWarpsPerBlock rows per block,
// gridDim.x = ceil(m / kGemvWarpsPerBlock)). Lane l reads the row's q in 16-byte vectors l, l + 32, ... (a
// warp's load is 512 contiguous bytes), kVectorsInFlight of them loaded before any is used so that each lane
// keeps that many independent loads in flight: 4 for q8 (16 elements each), 2 for q4 (32 each), 64 elements
// per lane either way. A vector is dequantized 16 elements at a time (device_quant.cuh's units: q4's low
// nibbles, then its high ones; 16 live weights instead of 32 keep the 8-row q4 kernel out of spills), each
// unit's block scale and offset read through the read-only cache (a block's lanes read the same few bytes).
// Each weight is the reference's dequantize_row value, so the result differs from the reference only in the
// order of the fp32 sums; one fp32 accumulator per row of x, a shuffle reduction, lane 0 writes out (+ bias
// after the sum). Vectors past k hold padding only and are skipped; within the last vector, x is read only
// below k. Rows of x: instantiated for kRows in {1, 2, 4, 8} as gemv.cu, times bits 4 and 8.
//
// The scalar path: x read as float4 needs k % 4 == 0 and x 16-byte aligned, and q's vector loads a 16-byte
// aligned q (so every row is). Otherwise lanes take elements l, l + 32, ... one at a time (uniform branch).
// No shared memory, no barrier: a warp past the last row returns at once.
#include <cstdint>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_quant.cuh"
#include "cuda/kernels/device_vector.cuh"
#include "cuda/kernels/gemv_rows.cuh"
#include "cuda/kernels/launch_shape.h"

namespace kvx::cuda {
namespace {

template <int kBits>
constexpr int kVectorsInFlight = kBits == 8 ? 4 : 2;  // 16-byte loads of q in flight per lane

// Element j of row `row`, dequantized (the scalar path).
template <int kBits>
__device__ __forceinline__ float dequantize_element(const QuantMatrix& w, const uint8_t* q_row, int64_t row,
                                                    int64_t n_blocks, int64_t j) {
    const QuantBlock b = load_quant_block(w, row, n_blocks, j / w.block);
    int32_t q;
    if constexpr (kBits == 8) {
        q = static_cast<int8_t>(__ldg(q_row + j));
    } else {
        const uint32_t byte = __ldg(q_row + j / 32 * 16 + j % 16);
        q = static_cast<int32_t>(j % 32 < 16 ? byte & 0x0fu : byte >> 4);
    }
    return dequantize_value(b, q, w.offset == QuantOffset::mins);
}

template <int kRows, int kBits>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_quant_kernel(float* out, const float* x, QuantMatrix w, const float* bias, int n, int k, int m,
                      bool vectorised) {
    constexpr int kElems = kQuantVectorElems<kBits>;
    constexpr int kUnroll = kVectorsInFlight<kBits>;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int row = static_cast<int>(blockIdx.x) * kGemvWarpsPerBlock + static_cast<int>(threadIdx.x / 32);
    if (row >= m) return;  // the whole warp
    const int64_t row_bytes = int64_t{w.padded_cols} * kBits / 8;
    const int64_t n_blocks = w.padded_cols / w.block;
    const uint8_t* q_row = w.q + row * row_bytes;

    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

    if (vectorised) {
        const int n_vectors = (k + kElems - 1) / kElems;  // later vectors are padding only
        const uint4* q_vectors = reinterpret_cast<const uint4*>(q_row);
        for (int base = lane; base < n_vectors; base += 32 * kUnroll) {
            uint4 raw[kUnroll];
            load_vectors_in_flight(q_vectors, base, n_vectors, raw);
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int v = base + 32 * u;
                if (v >= n_vectors) break;
#pragma unroll
                for (int part = 0; part < kElems / kQuantUnitElems; ++part) {
                    const int p = v * kElems + part * kQuantUnitElems;  // first element of the unit within the row
                    if (p >= k) break;
                    float wf[kQuantUnitElems];
                    dequantize_unit<kBits>(w, row, n_blocks, p / w.block, raw[u], part, wf);
                    accumulate_vector<true>(acc, wf, x, n, k, p);
                }
            }
        }
    } else {
        for (int p = lane; p < k; p += 32)
            accumulate_element(acc, dequantize_element<kBits>(w, q_row, row, n_blocks, p), x, n, k, p);
    }

    gemv_store_row(acc, out, bias, n, m, row, lane);
}

}  // namespace

void gemv_quant(float* out, const float* x, const QuantMatrix& w, const float* bias, int n, int k, int m,
                cudaStream_t stream) {
    constexpr const char* name = "gemv_quant";
    if (m > 0) require_quant_matrix(w, k, name);
    const bool vectorised = k % 4 == 0 && is_aligned(x, 16) && is_aligned(w.q, 16);
    const bool launched = launch_gemv_rows(name, n, k, m, [&](auto rows, unsigned blocks) {
        constexpr int kRows = decltype(rows)::value;
        if (w.bits == 8)
            gemv_quant_kernel<kRows, 8><<<blocks, kGemvThreads, 0, stream>>>(out, x, w, bias, n, k, m, vectorised);
        else
            gemv_quant_kernel<kRows, 4><<<blocks, kGemvThreads, 0, stream>>>(out, x, w, bias, n, k, m, vectorised);
    });
    if (launched) check_launch(name);
}

}  // namespace kvx::cuda
