// Quantized matrices (kernels/quant_matrix.h) turned back into floats on the device: a whole matrix into fp16
// for a prefill's cublasGemmEx, and some of its rows into fp32 for an embedding lookup.
//
// Buffers (device memory)
//   w.q        [rows][row_bytes], row_bytes = padded_cols * bits / 8 (q8 element order, q4 32-groups)
//   w.scales, w.offsets  [rows][n_blocks], n_blocks = padded_cols / block
//   dequantize_f16:  out fp16 bits [rows][cols], row-major, the row padding dropped (cuBLAS's w [m][k])
//   dequantize_rows: out fp32 [n_rows][cols]; indices [n_rows] int32, rows of w (token ids, positions)
//
// Why a prefill dequantizes instead of multiplying quantized weights directly: with n > kGemvMaxRows rows of
// x the product is bound by arithmetic, which the tensor cores do in fp16; expanding one matrix into a scratch
// buffer reused by every matrix (as llama.cpp does) costs one extra pass over 2 bytes per weight, small beside
// the n-row product, and keeps the model in device memory at its quantized size.
//
// Thread mapping: grid-stride loops over (output row, 16-byte vector of q) pairs. A thread reads one vector
// (16 elements of q8, 32 of q4) and its block's scale and offset, dequantizes it in registers exactly as the
// reference does (device_quant.cuh) and writes the elements below cols, one store each: the output rows are
// cols long and need not be aligned. Consecutive threads take consecutive vectors of a row, so a warp reads
// 512 contiguous bytes of q.
#include <cstdint>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_quant.cuh"
#include "cuda/kernels/device_vector.cuh"
#include "cuda/kernels/launch_shape.h"

namespace kvx::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t grid_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Output row `out_row` of n_rows: row `w_row` of w, its vectors' weights passed to store(out_row, column, value)
// for every column below cols.
template <int kBits, class Store>
__device__ __forceinline__ void dequantize_row_vectors(const QuantMatrix& w, int n_rows, int cols, bool aligned,
                                                       const int32_t* indices, Store store) {
    constexpr int kElems = kQuantVectorElems<kBits>;
    const int64_t vectors_per_row = (cols + kElems - 1) / kElems;
    const int64_t row_bytes = int64_t{w.padded_cols} * kBits / 8;
    const int64_t n_blocks = w.padded_cols / w.block;
    for (int64_t i = grid_thread(); i < int64_t{n_rows} * vectors_per_row; i += grid_threads()) {
        const int64_t out_row = i / vectors_per_row;
        const int64_t w_row = indices ? int64_t{indices[out_row]} : out_row;
        const int64_t first = i % vectors_per_row * kElems;
        const uint4 raw = load_q_vector(w.q + w_row * row_bytes + first * kBits / 8, aligned);
#pragma unroll
        for (int part = 0; part < kElems / kQuantUnitElems; ++part) {
            const int64_t unit = first + part * kQuantUnitElems;
            float v[kQuantUnitElems];
            dequantize_unit<kBits>(w, w_row, n_blocks, unit / w.block, raw, part, v);
#pragma unroll
            for (int e = 0; e < kQuantUnitElems; ++e)
                if (unit + e < cols) store(out_row, unit + e, v[e]);
        }
    }
}

template <int kBits>
__global__ void dequantize_f16_kernel(uint16_t* out, QuantMatrix w, int rows, int cols, bool aligned) {
    dequantize_row_vectors<kBits>(w, rows, cols, aligned, nullptr, [&](int64_t r, int64_t j, float value) {
        out[r * cols + j] = f32_to_f16_bits(value);
    });
}

// out = dequantized * scale, or out += dequantized * scale: one fp32 product and one fp32 add, as the CPU
// backend's embedding lookup (a scale of 1 changes nothing).
template <int kBits>
__global__ void dequantize_rows_kernel(float* out, const int32_t* indices, QuantMatrix w, int n_rows, int cols,
                                       float scale, bool accumulate, bool aligned) {
    dequantize_row_vectors<kBits>(w, n_rows, cols, aligned, indices, [&](int64_t r, int64_t j, float value) {
        float* o = out + r * cols + j;
        const float scaled = __fmul_rn(value, scale);  // never contracted with the add: the CPU rounds both
        *o = accumulate ? __fadd_rn(*o, scaled) : scaled;
    });
}

// Host: checks w against cols (kvx::Error naming `kernel`) and sizes the grid-stride grid for n_rows output
// rows; 0 blocks when there is nothing to do.
struct DequantizeGrid {
    unsigned blocks = 0;
    bool aligned = false;  // q 16-byte aligned: vector loads
};

DequantizeGrid dequantize_grid(const char* kernel, const QuantMatrix& w, int n_rows, int cols) {
    require(n_rows >= 0 && cols >= 0, kernel, "negative rows or cols");
    if (n_rows == 0 || cols == 0) return {};
    require_quant_matrix(w, cols, kernel);
    const int elems = w.bits == 8 ? kQuantVectorElems<8> : kQuantVectorElems<4>;
    return {grid_stride_blocks(int64_t{n_rows} * ((cols + elems - 1) / elems), kThreads), is_aligned(w.q, 16)};
}

}  // namespace

void dequantize_f16(uint16_t* out, const QuantMatrix& w, int rows, int cols, cudaStream_t stream) {
    const DequantizeGrid g = dequantize_grid("dequantize_f16", w, rows, cols);
    if (g.blocks == 0) return;
    if (w.bits == 8)
        dequantize_f16_kernel<8><<<g.blocks, kThreads, 0, stream>>>(out, w, rows, cols, g.aligned);
    else
        dequantize_f16_kernel<4><<<g.blocks, kThreads, 0, stream>>>(out, w, rows, cols, g.aligned);
    check_launch("dequantize_f16");
}

void dequantize_rows(float* out, const int32_t* indices, const QuantMatrix& w, int n_rows, int cols, float scale,
                     bool accumulate, cudaStream_t stream) {
    const DequantizeGrid g = dequantize_grid("dequantize_rows", w, n_rows, cols);
    if (g.blocks == 0) return;
    if (w.bits == 8)
        dequantize_rows_kernel<8><<<g.blocks, kThreads, 0, stream>>>(out, indices, w, n_rows, cols, scale, accumulate,
                                                                     g.aligned);
    else
        dequantize_rows_kernel<4><<<g.blocks, kThreads, 0, stream>>>(out, indices, w, n_rows, cols, scale, accumulate,
                                                                     g.aligned);
    check_launch("dequantize_rows");
}

}  // namespace kvx::cuda
