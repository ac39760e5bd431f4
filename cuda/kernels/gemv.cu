// The decode GEMV: out [n][m] = x [n][k] . w [m][k]^T (+ bias [m]) for 1 <= n <= kGemvMaxRows.
//
// A decode step reads every weight once and does n multiply-adds per weight, so it is bound by the bytes of
// w; the design serves one goal, streaming w at full bandwidth, read exactly once:
//
// Thread mapping
//   One warp per output row j (w's row j), kGemvWarpsPerBlock rows per block, gridDim.x = ceil(m / kGemvWarpsPerBlock).
//   Lane l reads w's row in 16-byte vectors (4 floats or 8 halves): vectors l, l + 32, l + 64, ..., so a warp's
//   load is 512 contiguous bytes. kUnroll vectors are loaded before any is used, so that each lane has that
//   many independent 16-byte loads in flight (the loop is not left to the compiler to pipeline). The matching
//   elements of the n rows of x are read through the read-only cache (__ldg): x is small and every warp of
//   the grid reads all of it, so it lives in L1/L2.
//   Each lane keeps one fp32 accumulator per row of x; a warp shuffle reduction sums them and lane 0 writes
//   out[r][j] (+ bias[j], one fp32 add after the sum, as the reference's matmul followed by add_bias).
//   Rows of x: the kernel is instantiated for kRows in {1, 2, 4, 8} (n rounded up; rows r >= n are masked, never
//   read), which keeps the instantiations to 8 while every n gets registers for its rows only, roughly.
//   The scalar path: when k is not a multiple of the vector width or w or x is not 16-byte aligned, lanes read
//   single elements l, l + 32, ... instead (same kernel, a uniform branch).
//   No shared memory; no block-wide barrier (a warp past the last row returns at once).
//
// fp16 weights are converted to fp32 exactly (cvt), so fp32 and fp16 differ from the reference only in the
// order of the fp32 sums.
#include <cstdint>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_f16.cuh"
#include "cuda/kernels/device_vector.cuh"
#include "cuda/kernels/gemv_rows.cuh"
#include "cuda/kernels/launch_shape.h"

namespace kvx::cuda {
namespace {

constexpr int kUnroll = 4;         // 16-byte weight loads in flight per lane

// One 16-byte vector of weights as floats: 4 fp32, or 8 fp16 converted exactly.
template <class W>
struct WeightVector;

template <>
struct WeightVector<float> {
    static constexpr int kElems = 4;
    __device__ static void to_floats(const uint4& raw, float (&f)[kElems]) {
        f[0] = __uint_as_float(raw.x);
        f[1] = __uint_as_float(raw.y);
        f[2] = __uint_as_float(raw.z);
        f[3] = __uint_as_float(raw.w);
    }
    __device__ static float element(const float* w, int64_t p) { return __ldg(w + p); }
};

template <>
struct WeightVector<uint16_t> {
    static constexpr int kElems = 8;
    __device__ static void to_floats(const uint4& raw, float (&f)[kElems]) {
        const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};  // element 2i in the low half of word i
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            f[2 * i] = f16_bits_to_f32(static_cast<uint16_t>(words[i] & 0xffffu));
            f[2 * i + 1] = f16_bits_to_f32(static_cast<uint16_t>(words[i] >> 16));
        }
    }
    __device__ static float element(const uint16_t* w, int64_t p) { return f16_bits_to_f32(__ldg(w + p)); }
};

template <int kRows, class W>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(float* out, const float* x, const W* w, const float* bias, int n, int k, int m, bool vectorised) {
    using Vector = WeightVector<W>;
    constexpr int kElems = Vector::kElems;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int row = static_cast<int>(blockIdx.x) * kGemvWarpsPerBlock + static_cast<int>(threadIdx.x / 32);
    if (row >= m) return;  // the whole warp: row is the same for its 32 lanes
    const W* w_row = w + static_cast<int64_t>(row) * k;

    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

    if (vectorised) {
        const int n_vectors = k / kElems;
        const uint4* w_vectors = reinterpret_cast<const uint4*>(w_row);
        for (int base = lane; base < n_vectors; base += 32 * kUnroll) {
            uint4 raw[kUnroll];
            load_vectors_in_flight(w_vectors, base, n_vectors, raw);
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int v = base + 32 * u;
                if (v >= n_vectors) break;
                float wf[kElems];
                Vector::to_floats(raw[u], wf);
                const int p = v * kElems;  // first element of the vector within the row
                accumulate_vector<false>(acc, wf, x, n, k, p);
            }
        }
    } else {
        for (int p = lane; p < k; p += 32) accumulate_element(acc, Vector::element(w_row, p), x, n, k, p);
    }

    gemv_store_row(acc, out, bias, n, m, row, lane);
}

template <class W>
void launch_gemv(const char* name, float* out, const float* x, const W* w, const float* bias, int n, int k, int m,
                 cudaStream_t stream) {
    const bool vectorised = k % WeightVector<W>::kElems == 0 && is_aligned(w, 16) && is_aligned(x, 16);
    const bool launched = launch_gemv_rows(name, n, k, m, [&](auto rows, unsigned blocks) {
        gemv_kernel<decltype(rows)::value, W><<<blocks, kGemvThreads, 0, stream>>>(out, x, w, bias, n, k, m, vectorised);
    });
    if (launched) check_launch(name);
}

}  // namespace

void gemv_f32(float* out, const float* x, const float* w, const float* bias, int n, int k, int m, cudaStream_t stream) {
    launch_gemv("gemv_f32", out, x, w, bias, n, k, m, stream);
}

void gemv_f16(float* out, const float* x, const uint16_t* w, const float* bias, int n, int k, int m,
              cudaStream_t stream) {
    launch_gemv("gemv_f16", out, x, w, bias, n, k, m, stream);
}

}  // namespace kvx::cuda
