// The decode GEMV (gemv_f32, gemv_f16) against cuBLAS at the matrix shapes of a 1B-class Llama, for one
// and for kGemvMaxRows rows of x: out [n][m] = x [n][k] . w [m][k]^T. cuBLAS is what the backend uses for
// larger batches, through the backend's own Blas (cuda/backend/blas.h): cublasSgemm without TF32 for fp32 weights;
// for fp16 weights x converted to fp16 (counted in the call's time, as the backend pays it on every
// product) and cublasGemmEx with fp32 accumulation.
//
// The implementation is the last argument (0 hand GEMV, 1 cuBLAS), so the two runs of one shape follow
// each other. bytes = the weight bytes the call reads (x and out are a rounding error next to them).
#include <type_traits>

#include "cuda/backend/blas.h"
#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "tools/bench/cuda/bench_timing.h"

namespace kvx::cuda::bench {
namespace {

enum Implementation : int64_t { kHand = 0, kCublas = 1 };

// W: float (fp32 weights) or uint16_t (fp16 bits). `copies` matrices the calls cycle through, together
// larger than the L2.
template <class W>
struct GemvData {
    int copies = 0;
    DeviceBuffer<W> weights;        // [copies][m][k]
    DeviceBuffer<float> x;          // [n][k]
    DeviceBuffer<uint16_t> x_f16;   // [n][k] fp16 bits: cuBLAS's fp16 input
    DeviceBuffer<float> out;        // [n][m]
};

template <class W>
GemvData<W> make_data(int n, int k, int m) {
    GemvData<W> d;
    const size_t matrix = static_cast<size_t>(k) * static_cast<size_t>(m);
    d.copies = rotation_copies(matrix * sizeof(W));
    if constexpr (std::is_same_v<W, float>) {
        d.weights = random_f32(static_cast<size_t>(d.copies) * matrix, 5);
    } else {
        d.weights = random_f16(static_cast<size_t>(d.copies) * matrix, 5);
    }
    d.x = random_f32(static_cast<size_t>(n) * static_cast<size_t>(k), 6);
    d.x_f16.resize(d.x.size());
    d.out.resize(static_cast<size_t>(n) * static_cast<size_t>(m));
    return d;
}

// Arguments: k (in_features), m (out_features), n (rows of x), implementation.
template <class W>
void gemv(benchmark::State& state) {
    const int k = static_cast<int>(state.range(0));
    const int m = static_cast<int>(state.range(1));
    const int n = static_cast<int>(state.range(2));
    const auto implementation = static_cast<Implementation>(state.range(3));
    GemvData<W> d = make_data<W>(n, k, m);
    Blas blas(bench_stream());  // the backend's own cuBLAS path
    const size_t matrix = static_cast<size_t>(k) * static_cast<size_t>(m);

    run_timed(state, d.copies, static_cast<double>(matrix * sizeof(W)), [&](int copy, cudaStream_t stream) {
        const W* w = d.weights.data() + static_cast<size_t>(copy) * matrix;
        if constexpr (std::is_same_v<W, float>) {
            if (implementation == kHand) {
                gemv_f32(d.out.data(), d.x.data(), w, nullptr, n, k, m, stream);
            } else {
                blas.matmul_f32(d.out.data(), d.x.data(), w, n, k, m);
            }
        } else {
            if (implementation == kHand) {
                gemv_f16(d.out.data(), d.x.data(), w, nullptr, n, k, m, stream);
            } else {
                blas.matmul_f16(d.out.data(), d.x.data(), w, d.x_f16.data(), n, k, m);
            }
        }
    });
}

template <class W>
void register_shapes(const char* name) {
    benchmark::internal::Benchmark* b = register_cuda_benchmark(name, gemv<W>, {"k", "m", "n", "impl"});
    // {k, m}: a 1B-class Llama (dim 2048, kv 512, hidden 8192, vocab 32000): wq and wo, wk and wv, w_gate and
    // w_up, w_down, the classifier.
    const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {2048, 512}, {2048, 8192}, {8192, 2048}, {2048, 32000}};
    for (const auto& [k, m] : shapes)
        for (int64_t n : {int64_t{1}, int64_t{kGemvMaxRows}})
            for (int64_t implementation : {kHand, kCublas}) b->Args({k, m, n, implementation});
}

}  // namespace

void register_gemv_benchmarks() {
    register_shapes<float>("cuda_gemv/f32");
    register_shapes<uint16_t>("cuda_gemv/f16");
}

}  // namespace kvx::cuda::bench
