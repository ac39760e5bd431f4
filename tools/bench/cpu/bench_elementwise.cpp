// Benchmarks of the per-row and element-wise kernels at model widths, for a decode step (1 row) and a
// prefill chunk (64 rows): rmsnorm, layernorm, rope, swiglu, gelu_tanh, add, add_bias. Their operands
// stay in the caches between calls, as they do between a model's layers, so GB/s may exceed the DRAM
// ceiling (frac_of_read_bw above 1).
//
// Flops count the formula's arithmetic, an exponential, tanh or square root as one.
#include <cmath>
#include <vector>

#include "tools/bench/support/bench_support.h"

namespace kvx::bench {
namespace {

std::vector<float> random_floats(int64_t n, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    fill_random(v, seed);
    return v;
}

// Arguments of every benchmark below: threads, rows, width (the row's length).
struct RowsShape {
    int rows;
    int width;
    int64_t elements() const { return int64_t{rows} * width; }
};

RowsShape rows_shape(const benchmark::State& state) {
    return {static_cast<int>(state.range(1)), static_cast<int>(state.range(2))};
}

void rmsnorm(benchmark::State& state) {
    use_threads(state);
    const RowsShape s = rows_shape(state);
    const std::vector<float> x = random_floats(s.elements(), 11);  // [rows][width]
    const std::vector<float> weight = random_floats(s.width, 12);  // [width]
    std::vector<float> out(x.size());                              // [rows][width]
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.rmsnorm(out.data(), x.data(), weight.data(), s.rows, s.width, 1e-5f);
        benchmark::ClobberMemory();
    }
    // Square and add, scale, times the weight.
    report_per_call(state, 8.0 * static_cast<double>(s.elements()) + 4.0 * s.width, 4.0 * static_cast<double>(s.elements()));
}

void layernorm(benchmark::State& state) {
    use_threads(state);
    const RowsShape s = rows_shape(state);
    const std::vector<float> x = random_floats(s.elements(), 13);  // [rows][width]
    const std::vector<float> weight = random_floats(s.width, 14);  // [width]
    const std::vector<float> bias = random_floats(s.width, 15);    // [width]
    std::vector<float> out(x.size());                              // [rows][width]
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.layernorm(out.data(), x.data(), weight.data(), bias.data(), s.rows, s.width, 1e-5f);
        benchmark::ClobberMemory();
    }
    // Mean (add), variance (subtract, square, add), normalise (subtract, scale, times weight, plus bias).
    report_per_call(state, 8.0 * static_cast<double>(s.elements()) + 8.0 * s.width, 8.0 * static_cast<double>(s.elements()));
}

// Width: the number of heads of 64 (a row is n_heads x 64).
void rope(benchmark::State& state) {
    use_threads(state);
    const RowsShape s = rows_shape(state);
    constexpr int kHeadDim = 64;
    const int n_heads = s.width / kHeadDim;
    std::vector<float> x = random_floats(s.elements(), 16);  // [rows][n_heads][kHeadDim], rotated in place
    const std::vector<float> cos = random_floats(int64_t{s.rows} * kHeadDim / 2, 17);  // [rows][kHeadDim / 2]
    const std::vector<float> sin = random_floats(int64_t{s.rows} * kHeadDim / 2, 18);  // [rows][kHeadDim / 2]
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.rope(x.data(), cos.data(), sin.data(), s.rows, n_heads, kHeadDim, kHeadDim);
        benchmark::ClobberMemory();
    }
    // Per pair of elements: 4 multiplies and 2 adds.
    report_per_call(state, 8.0 * static_cast<double>(s.elements()) + 4.0 * static_cast<double>(cos.size() + sin.size()),
                    3.0 * static_cast<double>(s.elements()));
}

void swiglu(benchmark::State& state) {
    use_threads(state);
    const int64_t n = rows_shape(state).elements();
    const std::vector<float> gate = random_floats(n, 19), up = random_floats(n, 20);  // [rows][width] each
    std::vector<float> out(static_cast<size_t>(n));  // [rows][width]
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.swiglu(out.data(), gate.data(), up.data(), n);
        benchmark::ClobberMemory();
    }
    // Negate, exponential, add, divide, multiply.
    report_per_call(state, 12.0 * static_cast<double>(n), 5.0 * static_cast<double>(n));
}

void gelu_tanh(benchmark::State& state) {
    use_threads(state);
    const int64_t n = rows_shape(state).elements();
    const std::vector<float> x = random_floats(n, 21);  // [rows][width]
    std::vector<float> out(static_cast<size_t>(n));  // [rows][width]
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.gelu_tanh(out.data(), x.data(), n);
        benchmark::ClobberMemory();
    }
    // x^3 (2), times 0.044715 plus x (2), times sqrt(2 / pi) (1), tanh (1), plus 1 (1), times 0.5 x (2).
    report_per_call(state, 8.0 * static_cast<double>(n), 9.0 * static_cast<double>(n));
}

void add(benchmark::State& state) {
    use_threads(state);
    const int64_t n = rows_shape(state).elements();
    std::vector<float> x = random_floats(n, 22);  // [rows][width], accumulated in place
    const std::vector<float> y = random_floats(n, 23);  // [rows][width]
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.add(x.data(), y.data(), n);
        benchmark::ClobberMemory();
    }
    report_per_call(state, 12.0 * static_cast<double>(n), static_cast<double>(n));
}

void add_bias(benchmark::State& state) {
    use_threads(state);
    const RowsShape s = rows_shape(state);
    std::vector<float> x = random_floats(s.elements(), 24);  // [rows][width], in place
    const std::vector<float> bias = random_floats(s.width, 25);  // [width]
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.add_bias(x.data(), bias.data(), s.rows, s.width);
        benchmark::ClobberMemory();
    }
    report_per_call(state, 8.0 * static_cast<double>(s.elements()) + 4.0 * s.width, static_cast<double>(s.elements()));
}

// Widths: SmolLM2-135M (dim 576, hidden 1536, 9 heads), GPT-2 (dim 768, hidden 3072), a 1B-class model
// (dim 2048, hidden 8192, 32 heads).
void rows_of(benchmark::internal::Benchmark* b, std::vector<int64_t> widths) {
    sweep(b, {"threads", "rows", "width"}, {thread_counts(), {1, 64}, std::move(widths)});
}

BENCHMARK(rmsnorm)->Apply([](benchmark::internal::Benchmark* b) { rows_of(b, {576, 2048}); });
BENCHMARK(layernorm)->Apply([](benchmark::internal::Benchmark* b) { rows_of(b, {768, 2048}); });
BENCHMARK(rope)->Apply([](benchmark::internal::Benchmark* b) { rows_of(b, {9 * 64, 32 * 64}); });
BENCHMARK(swiglu)->Apply([](benchmark::internal::Benchmark* b) { rows_of(b, {1536, 8192}); });
BENCHMARK(gelu_tanh)->Apply([](benchmark::internal::Benchmark* b) { rows_of(b, {3072}); });
BENCHMARK(add)->Apply([](benchmark::internal::Benchmark* b) { rows_of(b, {576, 2048}); });
BENCHMARK(add_bias)->Apply([](benchmark::internal::Benchmark* b) { rows_of(b, {768, 2048}); });

}  // namespace
}  // namespace kvx::bench
