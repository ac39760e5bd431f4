// Quantized matmul benchmarks (matmul_q): decode GEMV (one row of x) and prefill GEMM (32 and 512 rows) at the
// matrix shapes of SmolLM2-135M and of a 1B-class model, with the layouts llama.cpp's Q8_0 and Q4_0 store
// (symmetric blocks of 32 with fp16 scales) and Q4_K and Q6_K as kvx keeps them (q4k, q6k: int8 scales of fp16
// bases per 256, gguf_matrix.h). As in bench_matmul.cpp, each call reads the next of a rotation of
// copies of the matrix that together far exceed the L3 cache, so the GEMV's GB/s is against DRAM, the
// figure a quantized decode step lives by; bytes per call are the integers plus the scale tables (and x and
// out).
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


// A matrix form: its integers, blocks, offset and scale tables (kernels/quant_matrix.h).
struct QuantForm {
    int bits;
    int block;
    QuantOffset offset;
    QuantScales scales;
    bool six_bit_values = false;  // q8 integers in -32..31: q6 in row groups
};
// llama.cpp's Q8_0 and Q4_0: symmetric blocks of 32 with fp16 scales.
constexpr QuantForm kQ8_0{8, 32, QuantOffset::none, QuantScales::f16};
constexpr QuantForm kQ4_0{4, 32, QuantOffset::none, QuantScales::f16};
// Q4_K and Q6_K as kvx keeps them (engine/model/gguf_matrix.h): q4 in blocks of 32 with minimums, q8 in blocks of
// 16 of six-bit integers (q6 in row groups), each scale an int8 multiplier of an fp16 base per 256.
constexpr QuantForm kQ4_K{4, 32, QuantOffset::mins, QuantScales::i8_of_f16};
constexpr QuantForm kQ6_K{8, 16, QuantOffset::none, QuantScales::i8_of_f16, true};

struct QuantData {
    // The copies' tables, each table of every copy side by side: integers [copies][m][padded_k * bits / 8], then
    // scales [copies][m][n_blocks], minimums likewise, scale bases [copies][m][n_bases], minimum bases likewise;
    // random bytes (any byte is a q8 value, two q4 nibbles or an int8 multiplier), fp16 scales and bases random
    // floats.
    cpu::HugePageBuffer tables;
    size_t copies = 0;
    QuantTableBytes copy_bytes;    // of one copy
    QuantMatrix shape;             // the form, without tables
    std::vector<float> x;          // [n][k]
    std::vector<float> out;        // [n][m]
    cpu::HugePageBuffer grouped;       // the copies in row groups, side by side, when asked for
    std::vector<QuantMatrix> row_groups;  // [copies], reading `grouped`

    // Copy `copy` of the matrix, in row groups when made with them.
    QuantMatrix matrix(size_t copy) const { return row_groups.empty() ? rows(copy) : row_groups[copy]; }
    QuantMatrix rows(size_t copy) const {
        const QuantTableBytes& b = copy_bytes;
        const uint8_t* at = tables.data();
        auto next = [&](size_t bytes) {  // copy `copy` of the next table
            const uint8_t* table = bytes ? at + copy * bytes : nullptr;
            at += region_bytes(bytes);
            return table;
        };
        QuantMatrix w = shape;
        w.q = next(b.q);
        w.scales = next(b.scales);
        w.offsets = next(b.offsets);
        w.scale_bases = reinterpret_cast<const uint16_t*>(next(b.scale_bases));
        w.min_bases = reinterpret_cast<const uint16_t*>(next(b.min_bases));
        return w;
    }
    size_t read_bytes = 0;         // of one copy as a call reads it: its row groups' when in row groups
    double weight_bytes() const { return static_cast<double>(read_bytes); }
    // The bytes of a table's copies, rounded up to a cache line so that the next table is aligned.
    size_t region_bytes(size_t bytes) const { return (copies * bytes + 63) / 64 * 64; }
};

QuantData make_data(const QuantForm& f, int n, int k, int m, bool row_groups) {
    QuantData d;
    d.shape.bits = f.bits;
    d.shape.block = f.block;
    d.shape.padded_cols = static_cast<int32_t>(quant_padded_cols(k, f.block));
    d.shape.offset = f.offset;
    d.shape.scale_type = f.scales;
    d.shape.six_bit_values = f.six_bit_values;
    d.shape.x_rounding = f.scales == QuantScales::i8_of_f16 ? QuantXRounding::ggml_k : QuantXRounding::ggml;
    d.copy_bytes = quant_table_bytes(d.shape, m);
    // q6's row groups (Q6_K) are three quarters of its rows' q8: the rotation and the GB/s count what is read.
    d.read_bytes = row_groups ? row_groups_bytes(d.shape, m) : d.copy_bytes.total();
    d.copies = std::max<size_t>(1, rotation_bytes() / d.read_bytes);
    const QuantTableBytes& b = d.copy_bytes;
    d.tables = cpu::HugePageBuffer(d.region_bytes(b.q) + d.region_bytes(b.scales) + d.region_bytes(b.offsets) +
                                   d.region_bytes(b.scale_bases) + d.region_bytes(b.min_bases));
    const QuantMatrix first = d.rows(0);
    uint8_t* base = d.tables.data();
    auto fill_bytes = [&](const void* table, size_t bytes, uint64_t seed) {
        if (!table) return;
        std::mt19937_64 random(seed);
        uint8_t* p = base + (static_cast<const uint8_t*>(table) - d.tables.data());
        for (size_t i = 0; i < bytes; i += 8) {
            const uint64_t word = random();
            for (size_t j = 0; j < 8 && i + j < bytes; ++j) p[i + j] = static_cast<uint8_t>(word >> (8 * j));
        }
    };
    auto fill_f16 = [&](const void* table, size_t bytes, uint64_t seed) {
        if (!table) return;
        std::vector<uint16_t> halves(bytes / 2);
        fill_random_f16(halves, seed);
        std::memcpy(base + (static_cast<const uint8_t*>(table) - d.tables.data()), halves.data(), bytes);
    };
    fill_bytes(first.q, d.copies * b.q, 7);
    if (f.six_bit_values) {
        uint8_t* q = base + (first.q - d.tables.data());
        for (size_t i = 0; i < d.copies * b.q; ++i) q[i] = static_cast<uint8_t>(static_cast<int8_t>((q[i] & 63) - 32));
    }
    const bool f16 = f.scales == QuantScales::f16;  // else int8 multipliers (fp32 scales are not benchmarked)
    auto fill_entries = [&](const void* table, size_t bytes, uint64_t seed) {
        if (f16) fill_f16(table, bytes, seed);
        else fill_bytes(table, bytes, seed);
    };
    fill_entries(first.scales, d.copies * b.scales, 5);
    fill_entries(first.offsets, d.copies * b.offsets, 8);
    fill_f16(first.scale_bases, d.copies * b.scale_bases, 9);
    fill_f16(first.min_bases, d.copies * b.min_bases, 10);
    d.x.resize(static_cast<size_t>(n) * static_cast<size_t>(k));
    fill_random(d.x, 6);
    d.out.resize(static_cast<size_t>(n) * static_cast<size_t>(m));
    if (row_groups) {
        const size_t bytes = (row_groups_bytes(first, m) + 63) / 64 * 64;
        d.grouped = cpu::HugePageBuffer(d.copies * bytes);
        for (size_t copy = 0; copy < d.copies; ++copy)
            d.row_groups.push_back(copy_to_row_groups(d.rows(copy), m, d.grouped.data() + copy * bytes));
    }
    return d;
}

// Arguments: threads, n (rows of x), k (in_features), m (out_features).
template <const QuantForm& kForm, bool kRowGroups>
void matmul_q(benchmark::State& state) {
    use_threads(state);
    const int n = static_cast<int>(state.range(1));
    const int k = static_cast<int>(state.range(2));
    const int m = static_cast<int>(state.range(3));
    QuantData& d = reuse_or_make<QuantData>(std::make_tuple(&kForm, kRowGroups, n, k, m),
                                            [&] { return make_data(kForm, n, k, m, kRowGroups); });
    const KernelTable& kernels = kernels_under_test();
    size_t copy = 0;
    for (auto _ : state) {
        kernels.matmul_q(d.out.data(), d.x.data(), d.matrix(copy), n, k, m);
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

BENCHMARK(matmul_q<kQ8_0, true>)->Name("gemv/q8")->Apply(gemv_shapes);
BENCHMARK(matmul_q<kQ8_0, false>)->Name("gemv/q8-rows")->Apply(gemv_shapes);
BENCHMARK(matmul_q<kQ4_0, true>)->Name("gemv/q4")->Apply(gemv_shapes);
BENCHMARK(matmul_q<kQ4_0, false>)->Name("gemv/q4-rows")->Apply(gemv_shapes);
BENCHMARK(matmul_q<kQ4_K, true>)->Name("gemv/q4k")->Apply(gemv_shapes);
BENCHMARK(matmul_q<kQ6_K, true>)->Name("gemv/q6k")->Apply(gemv_shapes);
BENCHMARK(matmul_q<kQ8_0, true>)->Name("gemm/q8")->Apply(prefill_shapes);
BENCHMARK(matmul_q<kQ8_0, false>)->Name("gemm/q8-rows")->Apply(prefill_shapes);
BENCHMARK(matmul_q<kQ4_0, true>)->Name("gemm/q4")->Apply(prefill_shapes);
BENCHMARK(matmul_q<kQ4_0, false>)->Name("gemm/q4-rows")->Apply(prefill_shapes);
BENCHMARK(matmul_q<kQ4_K, true>)->Name("gemm/q4k")->Apply(prefill_shapes);
BENCHMARK(matmul_q<kQ6_K, true>)->Name("gemm/q6k")->Apply(prefill_shapes);

}  // namespace
}  // namespace kvx::bench
