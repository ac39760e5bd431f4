// Decode GEMV benchmarks (matmul and matmul_f16 with one row of x) at the matrix shapes of SmolLM2-135M
// and of a 1B-class model, weights from DRAM as in a decode step: each call reads the next of a rotation
// of copies of the matrix that together far exceed the L3 cache, in huge pages as the engine's weights are.
// gemv/f16 reads fp16 row groups, the layout the CPU backend copies fp16 weights into
// (kernels/f16_row_groups.h); gemv/f16-rows the model directory's rows. gemv_batch/f16 gives a few x rows
// at once (a server's decode batch, gemv_f16_groups_batch in matmul.inc) the same row groups: its GFLOP/s
// against kvx-bench's peak FMA rate says how close to compute-bound the batch is. gemm/f32 and gemm/f16
// are the prefill GEMM on the same layouts.
#include <algorithm>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cpu/backend/huge_page_buffer.h"
#include "kernels/f16_row_groups.h"
#include "tools/bench/support/bench_support.h"

namespace kvx::bench {
namespace {


template <class W>
struct GemvData {
    cpu::HugePageBuffer weights;  // [copies][matrix_elems] of W, fp32 or fp16 bits, each copy in rows [m][k] or
                                  // in fp16 row groups
    size_t copies = 0;
    size_t matrix_elems = 0;

    const W* matrix(size_t copy) const { return reinterpret_cast<const W*>(weights.data()) + copy * matrix_elems; }
    std::vector<float> x;       // [k]
    std::vector<float> out;     // [m]
};

template <class W>
GemvData<W> make_data(int k, int m, bool row_groups) {
    GemvData<W> d;
    const size_t matrix = static_cast<size_t>(k) * static_cast<size_t>(m);
    d.copies = std::max<size_t>(1, rotation_bytes() / (matrix * sizeof(W)));
    d.matrix_elems = row_groups ? f16_row_groups_elems(m, k) : matrix;
    std::vector<W> weights(matrix);  // [m][k], the same values in every copy
    if constexpr (std::is_same_v<W, float>) {
        fill_random(weights, 5);
    } else {
        fill_random_f16(weights, 5);
    }
    d.weights = cpu::HugePageBuffer(d.copies * d.matrix_elems * sizeof(W));
    for (size_t copy = 0; copy < d.copies; ++copy) {
        W* to = reinterpret_cast<W*>(d.weights.data()) + copy * d.matrix_elems;
        if constexpr (std::is_same_v<W, uint16_t>) {
            if (row_groups) {
                copy_to_f16_row_groups(weights.data(), m, k, to);
                continue;
            }
        }
        std::memcpy(to, weights.data(), matrix * sizeof(W));
    }
    d.x.resize(static_cast<size_t>(k));
    fill_random(d.x, 6);
    d.out.resize(static_cast<size_t>(m));
    return d;
}

// Arguments: threads, k (in_features), m (out_features).
template <class W, bool kRowGroups = false>
void gemv(benchmark::State& state) {
    use_threads(state);
    const int k = static_cast<int>(state.range(1));
    const int m = static_cast<int>(state.range(2));
    GemvData<W>& d = reuse_or_make<GemvData<W>>(std::make_tuple(k, m, kRowGroups),
                                                [&] { return make_data<W>(k, m, kRowGroups); });
    const KernelTable& kernels = kernels_under_test();
    const size_t matrix = static_cast<size_t>(k) * static_cast<size_t>(m);
    size_t copy = 0;
    for (auto _ : state) {
        const W* w = d.matrix(copy);
        if constexpr (std::is_same_v<W, float>) {
            kernels.matmul(d.out.data(), d.x.data(), w, 1, k, m);
        } else if constexpr (kRowGroups) {
            const MatmulPart part{.out = d.out.data(), .w_f16_groups = w, .m = m};
            kernels.matmuls(&part, 1, d.x.data(), 1, k);
        } else {
            kernels.matmul_f16(d.out.data(), d.x.data(), w, 1, k, m);
        }
        benchmark::DoNotOptimize(d.out.data());
        benchmark::ClobberMemory();
        copy = copy + 1 == d.copies ? 0 : copy + 1;
    }
    const double bytes = static_cast<double>(matrix * sizeof(W)) + 4.0 * (k + m);
    report_per_call(state, bytes, 2.0 * static_cast<double>(matrix));
}

// Arguments: threads, n (rows of x), k, m. n > 1 rows on the layouts the CPU backend keeps, fp32 rows and
// fp16 row groups: on row groups, 2 to kBatchGemvMaxRows (64) rows take the batched GEMV (a server's decode
// batch), more the prefill GEMM, as in the engine. GFLOP/s against kvx-bench's peak FMA rate says how close
// to compute-bound either is.
template <class W, bool kRowGroups = false>
void matmul_rows(benchmark::State& state) {
    use_threads(state);
    const int n = static_cast<int>(state.range(1));
    const int k = static_cast<int>(state.range(2));
    const int m = static_cast<int>(state.range(3));
    GemvData<W>& d = reuse_or_make<GemvData<W>>(std::make_tuple(k, m, kRowGroups),
                                                [&] { return make_data<W>(k, m, kRowGroups); });
    std::vector<float> x(static_cast<size_t>(n) * k);    // [n][k]
    std::vector<float> out(static_cast<size_t>(n) * m);  // [n][m]
    fill_random(x, 8);
    const KernelTable& kernels = kernels_under_test();
    const size_t matrix = static_cast<size_t>(k) * static_cast<size_t>(m);
    size_t copy = 0;
    for (auto _ : state) {
        const W* w = d.matrix(copy);
        if constexpr (std::is_same_v<W, float>) {
            kernels.matmul(out.data(), x.data(), w, n, k, m);
        } else {
            const MatmulPart part{.out = out.data(), .w_f16_groups = w, .m = m};
            kernels.matmuls(&part, 1, x.data(), n, k);
        }
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
        copy = copy + 1 == d.copies ? 0 : copy + 1;
    }
    const double bytes = static_cast<double>(matrix * sizeof(W)) + 4.0 * n * (k + m);
    report_per_call(state, bytes, 2.0 * n * static_cast<double>(matrix));
}

void model_shapes(benchmark::internal::Benchmark* b) {
    for (const auto& [k, m] : matrix_shapes()) sweep(b, {"threads", "k", "m"}, {thread_counts(), {k}, {m}});
}

BENCHMARK(gemv<float>)->Name("gemv/f32")->Apply(model_shapes);
BENCHMARK(gemv<uint16_t, true>)->Name("gemv/f16")->Apply(model_shapes);
BENCHMARK(gemv<uint16_t>)->Name("gemv/f16-rows")->Apply(model_shapes);
// SmolLM2-135M's shapes at 2, 16 and 64 rows.
BENCHMARK(matmul_rows<uint16_t, true>)->Name("gemv_batch/f16")->Apply([](benchmark::internal::Benchmark* b) {
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{576, 576}, {576, 1536}, {1536, 576}, {576, 49152}};
    for (const auto& [k, m] : shapes)
        sweep(b, {"threads", "rows", "k", "m"}, {thread_counts(), {2, 16, 64}, {k}, {m}});
});

BENCHMARK(matmul_rows<float>)->Name("gemm/f32")->Apply(prefill_shapes);
BENCHMARK(matmul_rows<uint16_t, true>)->Name("gemm/f16")->Apply(prefill_shapes);

}  // namespace
}  // namespace kvx::bench
