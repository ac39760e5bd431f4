// Quantized matmul benchmarks (matmul_q): decode GEMV (one row of x) and prefill GEMM (32 and 512 rows) at the
// matrix shapes of SmolLM2-135M and of a 1B-class model, with the layouts llama.cpp's Q8_0 and Q4_0 store:
// symmetric blocks of 32 with fp16 scales. As in bench_matmul.cpp, each call reads the next of a rotation of
// copies of the matrix that together far exceed the L3 cache, so the GEMV's GB/s is against DRAM, the
// figure a quantized decode step lives by; bytes per call are the integers plus the scales (and x and out).
// q4 and q8 run in row groups, the layout the CPU backend copies Q4_0 and Q8_0 matrices into
// (kernels/quant_row_groups.h), and as q4-rows and q8-rows in the model directory's layout, which other
// blocks and offsets still use. Every table is
// in huge pages, as the engine's copies are (cpu/backend/weight_copies.h).
#include <algorithm>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "cpu/backend/huge_page_buffer.h"
#include "kernels/quant_row_groups.h"
#include "tools/bench/support/bench_support.h"

namespace kvx::bench {
namespace {

// > 8x a 32 MB L3: no call finds its matrix in the cache.
constexpr size_t kRotationBytes = size_t{256} << 20;
constexpr int32_t kBlock = 32;  // Q8_0's and Q4_0's block

struct QuantData {
    cpu::HugePageBuffer tables;    // the copies' integers [copies][m][padded_k * bits / 8] (random), then their
                                   // scales [copies][m][padded_k / 32] (fp16 bits)
    size_t copies = 0;
    size_t q_bytes = 0;            // of one copy
    size_t scale_count = 0;        // of one copy
    int32_t padded_k = 0;
    std::vector<float> x;          // [n][k]
    std::vector<float> out;        // [n][m]
    cpu::HugePageBuffer grouped;       // the copies in row groups, side by side, when asked for
    std::vector<QuantMatrix> row_groups;  // [copies], reading `grouped`

    // Copy `copy` of the matrix, in row groups when made with them.
    QuantMatrix matrix(int bits, size_t copy) const { return row_groups.empty() ? rows(bits, copy) : row_groups[copy]; }
    QuantMatrix rows(int bits, size_t copy) const {
        QuantMatrix w;
        w.q = tables.data() + copy * q_bytes;
        w.scales = reinterpret_cast<const uint16_t*>(tables.data() + copies * q_bytes) + copy * scale_count;
        w.bits = bits;
        w.block = kBlock;
        w.padded_cols = padded_k;
        w.offset = QuantOffset::none;  // symmetric: q8 around 0, q4 around 8
        w.scales_f16 = true;
        return w;
    }
    double weight_bytes() const { return static_cast<double>(q_bytes + scale_count * sizeof(uint16_t)); }
};

QuantData make_data(int bits, int n, int k, int m, bool row_groups) {
    QuantData d;
    d.padded_k = static_cast<int32_t>(quant_padded_cols(k, kBlock));
    QuantMatrix shape;  // the tables' sizes depend on these fields only
    shape.bits = bits;
    shape.block = kBlock;
    shape.padded_cols = d.padded_k;
    shape.scales_f16 = true;
    const QuantTableBytes table_bytes = quant_table_bytes(shape, m);
    d.q_bytes = table_bytes.q;
    d.scale_count = table_bytes.scales / sizeof(uint16_t);
    d.copies = std::max<size_t>(1, kRotationBytes / static_cast<size_t>(d.weight_bytes()));
    const size_t q_total = d.copies * d.q_bytes;  // even: q8 rows and q4 rows of 16-byte groups
    d.tables = cpu::HugePageBuffer(q_total + d.copies * d.scale_count * sizeof(uint16_t));
    // Any byte is a valid q8 value or pair of q4 nibbles; the kernels' speed does not depend on which.
    std::mt19937_64 random(7);
    for (size_t i = 0; i < q_total; i += 8) {
        const uint64_t bytes = random();
        for (size_t b = 0; b < 8 && i + b < q_total; ++b) d.tables.data()[i + b] = static_cast<uint8_t>(bytes >> (8 * b));
    }
    std::vector<uint16_t> scales(d.copies * d.scale_count);
    fill_random_f16(scales, 5);
    std::memcpy(d.tables.data() + q_total, scales.data(), scales.size() * sizeof(uint16_t));
    d.x.resize(static_cast<size_t>(n) * static_cast<size_t>(k));
    fill_random(d.x, 6);
    d.out.resize(static_cast<size_t>(n) * static_cast<size_t>(m));
    if (row_groups) {
        const size_t bytes = row_groups_bytes(d.rows(bits, 0), m);  // 144 or 272 per group and block: aligned
        d.grouped = cpu::HugePageBuffer(d.copies * bytes);
        for (size_t copy = 0; copy < d.copies; ++copy)
            d.row_groups.push_back(copy_to_row_groups(d.rows(bits, copy), m, d.grouped.data() + copy * bytes));
    }
    return d;
}

// Arguments: threads, n (rows of x), k (in_features), m (out_features).
template <int kBits, bool kRowGroups>
void matmul_q(benchmark::State& state) {
    use_threads(state);
    const int n = static_cast<int>(state.range(1));
    const int k = static_cast<int>(state.range(2));
    const int m = static_cast<int>(state.range(3));
    QuantData& d = reuse_or_make<QuantData>(std::make_tuple(kBits, kRowGroups, n, k, m),
                                            [&] { return make_data(kBits, n, k, m, kRowGroups); });
    const KernelTable& kernels = kernels_under_test();
    size_t copy = 0;
    for (auto _ : state) {
        kernels.matmul_q(d.out.data(), d.x.data(), d.matrix(kBits, copy), n, k, m);
        benchmark::DoNotOptimize(d.out.data());
        benchmark::ClobberMemory();
        copy = copy + 1 == d.copies ? 0 : copy + 1;
    }
    const double bytes = d.weight_bytes() + 4.0 * static_cast<double>(n) * (k + m);
    report_per_call(state, bytes, 2.0 * n * static_cast<double>(k) * m, Products::int8);
}

void gemv_shapes(benchmark::internal::Benchmark* b) {
    for (const auto& [k, m] : matrix_shapes()) sweep(b, {"threads", "n", "k", "m"}, {thread_counts(), {1}, {k}, {m}});
}

BENCHMARK(matmul_q<8, true>)->Name("gemv/q8")->Apply(gemv_shapes);
BENCHMARK(matmul_q<8, false>)->Name("gemv/q8-rows")->Apply(gemv_shapes);
BENCHMARK(matmul_q<4, true>)->Name("gemv/q4")->Apply(gemv_shapes);
BENCHMARK(matmul_q<4, false>)->Name("gemv/q4-rows")->Apply(gemv_shapes);
BENCHMARK(matmul_q<8, true>)->Name("gemm/q8")->Apply(prefill_shapes);
BENCHMARK(matmul_q<8, false>)->Name("gemm/q8-rows")->Apply(prefill_shapes);
BENCHMARK(matmul_q<4, true>)->Name("gemm/q4")->Apply(prefill_shapes);
BENCHMARK(matmul_q<4, false>)->Name("gemm/q4-rows")->Apply(prefill_shapes);

}  // namespace
}  // namespace kvx::bench
