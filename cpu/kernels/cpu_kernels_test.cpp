// The CPU kernels' properties beyond agreeing with the reference, on every SIMD level this machine runs: a row's
// bits whatever the rows beside it, matmuls' parts and fp16 row groups bit for bit as their own matmuls, every
// fp16 value widened exactly, a window past row_pos as full attention, the contiguous-cache baselines, the
// same bits on 1 and 2 threads, and choosing a level. Each op against the reference, shape by shape, is the
// kernel ops harness's (tests/kernel_ops/). Outputs are poisoned with NaN before each call, so a kernel that
// leaves part of its output unwritten fails.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/kernels/cpu_kernels.h"
#include "cpu/kernels/test_support.h"
#include "kernels/error.h"
#include "kernels/f16.h"
#include "kernels/f16_row_groups.h"
#include "kernels/kernels.h"

namespace {

using kvx::cpu::testing::for_each_level;
using kvx::cpu::testing::kAllLevels;
using kvx::cpu::testing::machine_runs;
using kvx::cpu::testing::nan_filled;
using kvx::cpu::testing::random_floats;
using kvx::cpu::testing::ThreadCount;
using kvx::BaselineKernelTable;
using kvx::BlockCopy;
using kvx::ContiguousAttentionArgs;
using kvx::f16_to_f32;
using kvx::f32_to_f16;
using kvx::KernelTable;
using kvx::KvDtype;
using kvx::MatmulPart;
using kvx::PagedAttentionArgs;
using kvx::cpu::SimdLevel;

const KernelTable& reference = kvx::reference_kernels();
const BaselineKernelTable& reference_baselines = kvx::reference_baseline_kernels();

constexpr double kTolerance = 1e-5;  // relative to max(1, max |expected|)

// Passes when max |actual - expected| <= tolerance * max(1, max |expected|) and nothing is NaN or infinite.
struct Closeness {
    bool ok = true;
    double max_error = 0.0;
    double bound = 0.0;
    size_t worst = 0;
    size_t non_finite = 0;  // elements of actual that are NaN or infinite, e.g. never written
};

Closeness compare(const std::vector<float>& actual, const std::vector<float>& expected, double tolerance) {
    Closeness c;
    double max_expected = 0.0;
    for (float e : expected) max_expected = std::max(max_expected, std::fabs(static_cast<double>(e)));
    c.bound = tolerance * std::max(1.0, max_expected);
    for (size_t i = 0; i < actual.size(); ++i) {
        if (!std::isfinite(actual[i])) {
            ++c.non_finite;
            continue;
        }
        const double error = std::fabs(static_cast<double>(actual[i]) - expected[i]);
        if (error > c.max_error) {
            c.max_error = error;
            c.worst = i;
        }
    }
    c.ok = actual.size() == expected.size() && c.non_finite == 0 && c.max_error <= c.bound;
    return c;
}

// A macro so that the INFO lands in the calling test.
#define CHECK_CLOSE(actual, expected, tolerance)                                                          \
    do {                                                                                                  \
        const Closeness closeness_ = compare(actual, expected, tolerance);                                \
        INFO("max error " << closeness_.max_error << " at " << closeness_.worst << " (bound "            \
                          << closeness_.bound << "), non-finite outputs: " << closeness_.non_finite);     \
        CHECK(closeness_.ok);                                                                             \
    } while (false)

// ---- matmul, matmul_f16 ------------------------------------------------------------------------------

// Weights [m][k] drawn like the activations: fp32 for matmul, or the same draws rounded to fp16 for
// matmul_f16, with every 61st one scaled into fp16's subnormal range.
template <class W>
std::vector<W> random_weights(size_t n, uint32_t seed) {
    std::vector<float> w = random_floats(n, seed);
    if constexpr (std::is_same_v<W, float>) {
        return w;
    } else {
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = kvx::f32_to_f16(i % 61 == 0 ? w[i] * 1e-5f : w[i]);
        return h;
    }
}

std::vector<float> run_matmul(const KernelTable& kernels, const std::vector<float>& x, const std::vector<float>& w,
                              int n, int k, int m) {
    std::vector<float> out = nan_filled(static_cast<size_t>(n) * m);  // [n][m]
    kernels.matmul(out.data(), x.data(), w.data(), n, k, m);
    return out;
}

std::vector<float> run_matmul(const KernelTable& kernels, const std::vector<float>& x,
                              const std::vector<uint16_t>& w, int n, int k, int m) {
    std::vector<float> out = nan_filled(static_cast<size_t>(n) * m);  // [n][m]
    kernels.matmul_f16(out.data(), x.data(), w.data(), n, k, m);
    return out;
}

// Speculative decoding verifies draft tokens in one multi-row pass and needs each row's logits to be the
// bits a single-row decode step gives: the GEMM (n > 1) must compute a row exactly as the GEMV (n == 1)
// does, for k within one depth block, on a block boundary and across several, ragged or not.
TEMPLATE_TEST_CASE("matmul gives a row the same bits whatever the number of rows", "[matmul][rows]", float,
                   uint16_t) {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 700;
        for (int k : {1, 7, 64, 172, 576, 1023, 1024, 1025, 1536, 2100})
            for (int m : {1, 7, 17, 172, 257}) {
                const int n = 9;
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, ++seed);           // [n][k]
                const std::vector<TestType> w = random_weights<TestType>(static_cast<size_t>(m) * k, ++seed);  // [m][k]
                for (int rows : {2, 3, 4, 5, 9}) {
                    const std::vector<float> all = run_matmul(kernels, x, w, rows, k, m);  // [rows][m]
                    for (int r = 0; r < rows; ++r) {
                        const std::vector<float> row(x.begin() + int64_t{r} * k, x.begin() + int64_t{r + 1} * k);
                        const std::vector<float> alone = run_matmul(kernels, row, w, 1, k, m);  // [1][m]
                        INFO("k=" << k << " m=" << m << " rows=" << rows << " row " << r);
                        CHECK(std::equal(alone.begin(), alone.end(), all.begin() + int64_t{r} * m));
                    }
                }
            }
    });
}

// A decode step's q, k and v projections (and a prefill chunk's) in one matmuls call, fp32 and fp16 parts
// side by side: each part must get the bits its own matmul gives, on 1 and 2 threads (shares then span
// parts), and widths that are not multiples of a GEMV tile put part boundaries inside a share's tiles.
TEST_CASE("matmuls gives each part the bits of its own matmul", "[matmul]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 900;
        for (int n : {1, 3})
            for (int k : {64, 576, 1100})
                for (int threads : {1, 2}) {
                    const ThreadCount scope(threads);
                    const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, ++seed);  // [n][k]
                    const int m[3] = {576, 13, 192};
                    const std::vector<float> w0 = random_weights<float>(static_cast<size_t>(m[0]) * k, ++seed);
                    const std::vector<uint16_t> w1 = random_weights<uint16_t>(static_cast<size_t>(m[1]) * k, ++seed);
                    const std::vector<float> w2 = random_weights<float>(static_cast<size_t>(m[2]) * k, ++seed);
                    auto run_matmuls = [&](const KernelTable& table) {
                        std::array<std::vector<float>, 3> out;  // out[p]: [n][m[p]]
                        for (int p = 0; p < 3; ++p) out[p] = nan_filled(static_cast<size_t>(n) * m[p]);
                        const MatmulPart parts[3] = {{.out = out[0].data(), .w_f32 = w0.data(), .m = m[0]},
                                                     {.out = out[1].data(), .w_f16 = w1.data(), .m = m[1]},
                                                     {.out = out[2].data(), .w_f32 = w2.data(), .m = m[2]}};
                        table.matmuls(parts, 3, x.data(), n, k);
                        return out;
                    };
                    const auto out = run_matmuls(kernels);
                    const auto expected = run_matmuls(reference);
                    INFO("n=" << n << " k=" << k << " threads=" << threads);
                    CHECK(out[0] == run_matmul(kernels, x, w0, n, k, m[0]));
                    CHECK(out[1] == run_matmul(kernels, x, w1, n, k, m[1]));
                    CHECK(out[2] == run_matmul(kernels, x, w2, n, k, m[2]));
                    for (int p = 0; p < 3; ++p) CHECK_CLOSE(out[p], expected[p], kTolerance);
                }
    });
}

// fp16 weights in row groups (kernels/f16_row_groups.h), as the CPU backend copies them, must give the bits of
// the same weights in rows: the GEMV reads them with another loop, a batch of 2 to 64 rows with a third, the
// GEMM packs from them. Shapes with k not
// a multiple of 16 (padded chunks) or of a depth block, m not a multiple of 8 (padded rows), on 1 and 2
// threads, where a share can start or end inside a group; and three parts whose groups straddle shares.
TEST_CASE("matmuls on fp16 row groups gives the bits of fp16 rows", "[matmul][f16_groups]") {
    auto to_groups = [](const std::vector<uint16_t>& w, int m, int k) {
        std::vector<uint16_t> groups(kvx::f16_row_groups_elems(m, k));
        kvx::copy_to_f16_row_groups(w.data(), m, k, groups.data());
        return groups;
    };
    auto run = [](const KernelTable& table, const std::vector<float>& x, const uint16_t* w, bool grouped, int n, int k,
                  int m) {
        std::vector<float> out = nan_filled(static_cast<size_t>(n) * m);  // [n][m]
        MatmulPart part{.out = out.data(), .m = m};
        (grouped ? part.w_f16_groups : part.w_f16) = w;
        table.matmuls(&part, 1, x.data(), n, k);
        return out;
    };
    uint32_t seed = 1300;
    for (int n : {1, 2, 3, 5, 16, 33, 65})  // 2 .. 64: the batched GEMV (tiles of 1 to 3 rows); 65: the GEMM
        for (int k : {1, 7, 16, 17, 172, 576, 1023, 1025, 2100})
            for (int m : {1, 7, 8, 9, 17, 64}) {
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, ++seed);  // [n][k]
                const std::vector<uint16_t> w = random_weights<uint16_t>(static_cast<size_t>(m) * k, ++seed);  // [m][k]
                const std::vector<uint16_t> groups = to_groups(w, m, k);
                INFO("n=" << n << " k=" << k << " m=" << m);
                CHECK(run(reference, x, groups.data(), true, n, k, m) == run(reference, x, w.data(), false, n, k, m));
                for_each_level([&](const KernelTable& kernels) {
                    for (int threads : {1, 2}) {
                        const ThreadCount scope(threads);
                        INFO("threads=" << threads);
                        CHECK(run(kernels, x, groups.data(), true, n, k, m) == run(kernels, x, w.data(), false, n, k, m));
                    }
                });
            }
    for_each_level([&](const KernelTable& kernels) {
        const ThreadCount scope(2);
        const int k = 576;
        const int m[3] = {13, 5, 100};
        const std::vector<float> x = random_floats(k, 1400);
        std::array<std::vector<float>, 3> out;  // out[q]: [m[q]]
        std::array<std::vector<uint16_t>, 3> w, groups;
        std::array<MatmulPart, 3> parts;
        for (int q = 0; q < 3; ++q) {
            w[q] = random_weights<uint16_t>(static_cast<size_t>(m[q]) * k, 1401 + q);
            groups[q] = to_groups(w[q], m[q], k);
            out[q] = nan_filled(static_cast<size_t>(m[q]));
            parts[q] = {.out = out[q].data(), .w_f16_groups = groups[q].data(), .m = m[q]};
        }
        kernels.matmuls(parts.data(), 3, x.data(), 1, k);
        for (int q = 0; q < 3; ++q) {
            INFO("part " << q);
            CHECK(out[q] == run(kernels, x, w[q].data(), false, 1, k, m[q]));
        }
    });
}

// Each of the 65536 fp16 bit patterns (normals, subnormals, signed zeros, infinities, NaNs) sits alone in a
// row of zeros, at a position that varies from row to row (whole vectors and the partial tail), against a
// one-hot x: every output is that one weight times 1, so it must equal kernels/f16.h's conversion exactly.
TEST_CASE("matmul_f16 widens every fp16 value exactly", "[matmul]") {
    constexpr int k = 17, m = 65536;
    std::vector<uint16_t> w(static_cast<size_t>(m) * k, 0);  // [m][k]
    std::vector<int> position(m);                            // [m], where row j's value sits
    for (int j = 0; j < m; ++j) {
        position[j] = j % k;
        w[static_cast<size_t>(j) * k + position[j]] = static_cast<uint16_t>(j);
    }
    for_each_level([&](const KernelTable& kernels) {
        for (int p = 0; p < k; ++p) {
            std::vector<float> x(k, 0.0f);  // [1][k], one-hot at p
            x[p] = 1.0f;
            const std::vector<float> out = run_matmul(kernels, x, w, 1, k, m);
            int wrong = 0;
            for (int j = 0; j < m; ++j) {
                if (position[j] != p) continue;
                const float expected = kvx::f16_to_f32(static_cast<uint16_t>(j));
                const bool same = std::isnan(expected) ? std::isnan(out[j]) : out[j] == expected;
                if (!same && wrong++ < 5) CHECK(out[j] == expected);  // reports the first few, with their values
            }
            INFO("position " << p);
            CHECK(wrong == 0);
        }
    });
}

// ---- paged_attention: a window past row_pos, the contiguous cache ------------------------------------

// A batch over a paged cache: sequence 0 contributes a prefill chunk (its last prefill_rows positions),
// every other sequence one decode row (its last position). Physical blocks are shuffled, a few are never
// referenced, and table entries past a sequence's end are -1.
struct AttentionBatch {
    int n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
    std::vector<int> seq_lengths;  // positions in the cache per sequence
    int prefill_rows = 1;
    int window = 0;  // PagedAttentionArgs::window
    KvDtype kv_dtype = KvDtype::f32;  // f16: the kernels read k_cache_f16 / v_cache_f16 (to_f16)

    int table_stride = 0;
    std::vector<float> q;             // [n_rows][n_heads][head_dim]
    std::vector<float> k_cache;       // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<float> v_cache;       // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<int32_t> tables;      // [n_seqs][table_stride]
    std::vector<int32_t> row_seq;     // [n_rows]
    std::vector<int32_t> row_pos;     // [n_rows]
    std::vector<uint16_t> k_cache_f16;  // k_cache's layout, IEEE fp16 bits
    std::vector<uint16_t> v_cache_f16;  // v_cache's layout, IEEE fp16 bits

    int n_rows() const { return static_cast<int>(row_seq.size()); }

    // Reads the cache as fp16 from now on: k_cache and v_cache become the values fp16 holds, so that the
    // reference, which reads the same fp16 bits, and a check on the fp32 copies agree.
    void to_f16() {
        kv_dtype = KvDtype::f16;
        for (auto [from, to] : {std::pair{&k_cache, &k_cache_f16}, std::pair{&v_cache, &v_cache_f16}}) {
            to->resize(from->size());
            for (size_t i = 0; i < from->size(); ++i) {
                (*to)[i] = f32_to_f16((*from)[i]);
                (*from)[i] = f16_to_f32((*to)[i]);
            }
        }
    }

    void build(uint32_t seed) {
        std::mt19937 rng(seed);
        const int n_seqs = static_cast<int>(seq_lengths.size());
        std::vector<int> blocks_of(n_seqs);
        int used_blocks = 0;
        for (int s = 0; s < n_seqs; ++s) {
            blocks_of[s] = (seq_lengths[s] + block_size - 1) / block_size;
            used_blocks += blocks_of[s];
            table_stride = std::max(table_stride, blocks_of[s] + 2);
        }
        const int num_blocks = used_blocks + 3;
        std::vector<int32_t> physical(num_blocks);
        std::iota(physical.begin(), physical.end(), 0);
        std::shuffle(physical.begin(), physical.end(), rng);

        tables.assign(static_cast<size_t>(n_seqs) * table_stride, -1);
        int next = 0;
        for (int s = 0; s < n_seqs; ++s)
            for (int b = 0; b < blocks_of[s]; ++b) tables[static_cast<size_t>(s) * table_stride + b] = physical[next++];

        // Rows: a decode row of sequence 1 first, then sequence 0's prefill chunk, then the other decode rows.
        auto add_row = [&](int s, int pos) {
            row_seq.push_back(s);
            row_pos.push_back(pos);
        };
        if (n_seqs > 1) add_row(1, seq_lengths[1] - 1);
        for (int r = 0; r < prefill_rows; ++r) add_row(0, seq_lengths[0] - prefill_rows + r);
        for (int s = 2; s < n_seqs; ++s) add_row(s, seq_lengths[s] - 1);

        const size_t cache_size = static_cast<size_t>(num_blocks) * n_kv_heads * block_size * head_dim;
        k_cache = random_floats(cache_size, seed + 1);
        v_cache = random_floats(cache_size, seed + 2);
        // Larger queries make the softmax peaky, so the running maximum really moves.
        q = random_floats(static_cast<size_t>(n_rows()) * n_heads * head_dim, seed + 3, -4.0f, 4.0f);
    }

    std::vector<float> run(const KernelTable& kernels) const {
        std::vector<float> out = nan_filled(q.size());
        PagedAttentionArgs args;
        args.q = q.data();
        const bool f16 = kv_dtype == KvDtype::f16;
        args.kv_dtype = kv_dtype;
        args.k_cache = f16 ? static_cast<const void*>(k_cache_f16.data()) : k_cache.data();
        args.v_cache = f16 ? static_cast<const void*>(v_cache_f16.data()) : v_cache.data();
        args.window = window;
        args.block_tables = tables.data();
        args.row_seq = row_seq.data();
        args.row_pos = row_pos.data();
        args.out = out.data();
        args.n_rows = n_rows();
        args.n_heads = n_heads;
        args.n_kv_heads = n_kv_heads;
        args.head_dim = head_dim;
        args.block_size = block_size;
        args.table_stride = table_stride;
        args.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        kernels.paged_attention(args);
        return out;
    }
};

AttentionBatch attention_batch(int n_kv_heads, int group, int head_dim, int block_size, std::vector<int> seq_lengths,
                               int prefill_rows, uint32_t seed) {
    AttentionBatch batch;
    batch.n_kv_heads = n_kv_heads;
    batch.n_heads = n_kv_heads * group;
    batch.head_dim = head_dim;
    batch.block_size = block_size;
    batch.seq_lengths = std::move(seq_lengths);
    batch.prefill_rows = prefill_rows;
    batch.build(seed);
    return batch;
}

TEST_CASE("paged_attention with a window of at least row_pos + 1 equals full attention", "[window]") {
    for_each_level([](const KernelTable& kernels) {
        AttentionBatch batch = attention_batch(3, 4, 64, 16, {90, 33, 4, 129, 64}, 7, 1100);
        const std::vector<float> full = batch.run(kernels);
        CHECK_CLOSE(full, batch.run(reference), kTolerance);
        for (int window : {129, 130, 100000}) {
            batch.window = window;
            CHECK(batch.run(kernels) == full);
        }
    });
}

// A pair's result depends on its own keys alone (attention_schedule.inc): a row gives the same bits in a call of
// its own, beside a prompt chunk and other decode rows, and on 1 or 2 threads, though its keys go through split-K
// in one of these calls and not in another, and a prompt chunk's rows share their keys in tiles of 8.
// With an fp16 cache the prompt chunk's rows read its keys and values widened to fp32 once for the tile, and a
// row alone reads the fp16 rows: the heads' passes must still be the same, so that the bits are.
TEST_CASE("paged_attention gives each row the same bits alone, in a batch, and on any number of threads", "[split]") {
    for_each_level([](const KernelTable& kernels) {
        for (auto [window, f16] : {std::pair{0, false}, std::pair{300, false}, std::pair{0, true}}) {
            INFO("window " << window << (f16 ? ", fp16 cache" : ", fp32 cache"));
            // Sequence 0: a 21-row prompt chunk ending at 1100 (5 key segments); the rest one decode row each.
            AttentionBatch batch = attention_batch(3, 3, 64, 16, {1100, 2000, 70, 700}, 21, 1700);
            batch.window = window;
            if (f16) batch.to_f16();
            std::vector<float> together;
            {
                ThreadCount one(1);
                together = batch.run(kernels);
            }
            CHECK_CLOSE(together, batch.run(reference), kTolerance);
            {
                ThreadCount two(2);
                CHECK(batch.run(kernels) == together);
            }
            const size_t row_floats = static_cast<size_t>(batch.n_heads) * batch.head_dim;
            for (int row = 0; row < batch.n_rows(); ++row) {
                AttentionBatch alone = batch;
                alone.row_seq = {batch.row_seq[static_cast<size_t>(row)]};
                alone.row_pos = {batch.row_pos[static_cast<size_t>(row)]};
                alone.q.assign(batch.q.begin() + static_cast<std::ptrdiff_t>(row * row_floats),
                               batch.q.begin() + static_cast<std::ptrdiff_t>((row + 1) * row_floats));
                for (int threads : {1, 2}) {
                    ThreadCount count(threads);
                    const std::vector<float> out = alone.run(kernels);
                    INFO("row " << row << " at position " << alone.row_pos[0] << " alone, " << threads << " threads");
                    CHECK(std::equal(out.begin(), out.end(), together.begin() + static_cast<std::ptrdiff_t>(row * row_floats)));
                }
            }
        }
    });
}

// The paged batch's cache rewritten as one contiguous region per sequence: the contiguous kernel must
// give what the paged one gives on the same keys and values, and the reference's answer.
TEST_CASE("contiguous_attention matches paged_attention on the same data, and the reference", "[contiguous]") {
    for_each_level([](const KernelTable& kernels, const BaselineKernelTable& baselines) {
        uint32_t seed = 1500;
        for (int group : {1, 4}) {
            for (int window : {0, 1, 40}) {
                for (int block_size : {1, 16, 64}) {
                    INFO("contiguous group=" << group << " window=" << window << " block_size=" << block_size);
                    AttentionBatch batch = attention_batch(2, group, 80, block_size, {150, 1, 67, 300}, 5, ++seed);
                    batch.window = window;
                    const int n_seqs = 4, max_seq = 301;
                    const size_t row = static_cast<size_t>(batch.head_dim);
                    // [n_seqs][n_kv_heads][max_seq][head_dim]; positions past a sequence's end stay NaN
                    std::vector<float> k = nan_filled(static_cast<size_t>(n_seqs) * batch.n_kv_heads * max_seq * row);
                    std::vector<float> v = k;
                    for (int s = 0; s < n_seqs; ++s)
                        for (int h = 0; h < batch.n_kv_heads; ++h)
                            for (int p = 0; p < batch.seq_lengths[static_cast<size_t>(s)]; ++p) {
                                const size_t block = static_cast<size_t>(batch.tables[static_cast<size_t>(s) * batch.table_stride + p / block_size]);
                                const size_t from = ((block * batch.n_kv_heads + h) * block_size + p % block_size) * row;
                                const size_t to = ((static_cast<size_t>(s) * batch.n_kv_heads + h) * max_seq + p) * row;
                                std::copy_n(batch.k_cache.begin() + static_cast<std::ptrdiff_t>(from), row, k.begin() + static_cast<std::ptrdiff_t>(to));
                                std::copy_n(batch.v_cache.begin() + static_cast<std::ptrdiff_t>(from), row, v.begin() + static_cast<std::ptrdiff_t>(to));
                            }
                    auto run = [&](const BaselineKernelTable& table) {
                        std::vector<float> out = nan_filled(batch.q.size());
                        ContiguousAttentionArgs args;
                        args.q = batch.q.data();
                        args.k_cache = k.data();
                        args.v_cache = v.data();
                        args.row_seq = batch.row_seq.data();
                        args.row_pos = batch.row_pos.data();
                        args.out = out.data();
                        args.n_rows = batch.n_rows();
                        args.n_heads = batch.n_heads;
                        args.n_kv_heads = batch.n_kv_heads;
                        args.head_dim = batch.head_dim;
                        args.max_seq = max_seq;
                        args.window = window;
                        args.scale = 1.0f / std::sqrt(static_cast<float>(batch.head_dim));
                        table.contiguous_attention(args);
                        return out;
                    };
                    const std::vector<float> contiguous = run(baselines);
                    CHECK_CLOSE(contiguous, batch.run(kernels), 1e-6);
                    CHECK_CLOSE(contiguous, run(reference_baselines), kTolerance);
                    CHECK_CLOSE(run(reference_baselines), batch.run(reference), 1e-12);
                }
            }
        }
    });
}

// ---- reorder_beams ------------------------------------------------------------------------------------

// Caches of distinct random bytes, K unlike V, so that a copy from the wrong place or cache shows.
std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> bytes(n);
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
    return bytes;
}

// Up to 64 beams (33: "wrong results past 32 beams"); V must follow beam_indices from V's own old rows.
TEST_CASE("reorder_beams gathers each new beam from its old beam, K from K and V from V", "[reorder_beams]") {
    for_each_level([](const KernelTable&, const BaselineKernelTable& baselines) {
        uint32_t seed = 1700;
        for (int threads : {1, 2}) {
            const ThreadCount scope(threads);
            for (int n_beams : {1, 2, 5, 32, 33, 64}) {
                for (int elem_bytes : {2, 4}) {
                    INFO("reorder_beams threads=" << threads << " beams=" << n_beams << " elem_bytes=" << elem_bytes);
                    const int64_t beam_elems = int64_t{3} * 37 * 24;  // [kv_heads 3][max_seq 37][head_dim 24]
                    const size_t beam_bytes = static_cast<size_t>(beam_elems) * elem_bytes;
                    std::mt19937 rng(++seed);
                    std::vector<int32_t> indices(static_cast<size_t>(n_beams));
                    for (int32_t& i : indices) i = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_beams));
                    if (n_beams > 1) indices[0] = n_beams - 1;  // beam 0 from the last: a plain copy would fail

                    const std::vector<unsigned char> k = random_bytes(n_beams * beam_bytes, ++seed);
                    const std::vector<unsigned char> v = random_bytes(n_beams * beam_bytes, ++seed);
                    std::vector<unsigned char> k_new(k.size(), 0), v_new(v.size(), 0);
                    baselines.reorder_beams(k_new.data(), v_new.data(), k.data(), v.data(), indices.data(), n_beams,
                                            beam_elems, elem_bytes);
                    std::vector<unsigned char> k_expected(k.size(), 1), v_expected(v.size(), 1);
                    reference_baselines.reorder_beams(k_expected.data(), v_expected.data(), k.data(), v.data(),
                                                      indices.data(), n_beams, beam_elems, elem_bytes);
                    CHECK(k_new == k_expected);
                    CHECK(v_new == v_expected);
                    for (int i = 0; i < n_beams; ++i) {
                        const auto to = i * static_cast<std::ptrdiff_t>(beam_bytes);
                        const auto from = indices[static_cast<size_t>(i)] * static_cast<std::ptrdiff_t>(beam_bytes);
                        INFO("beam " << i << " from " << indices[static_cast<size_t>(i)]);
                        CHECK(std::equal(k_new.begin() + to, k_new.begin() + to + static_cast<std::ptrdiff_t>(beam_bytes), k.begin() + from));
                        CHECK(std::equal(v_new.begin() + to, v_new.begin() + to + static_cast<std::ptrdiff_t>(beam_bytes), v.begin() + from));
                    }
                }
            }
        }
    });
}

// ---- threads ------------------------------------------------------------------------------------------

// Shapes large enough that every kernel opens a parallel region: the result must not depend on how the
// work is split (each output is computed the same way whichever thread gets it).
TEST_CASE("results with 1 and 2 threads are identical", "[threads]") {
    for_each_level([](const KernelTable& kernels) {
        auto with_threads = [&](int threads, auto run) {
            const ThreadCount scope(threads);
            return run();
        };
        auto same_with_1_and_2_threads = [&](auto run) { return with_threads(1, run) == with_threads(2, run); };

        const std::vector<float> x = random_floats(33 * 1536, 1);
        const std::vector<float> w = random_floats(1536 * 576, 2);
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w, 1, 576, 1536); }));
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w, 1, 1536, 576); }));
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w, 33, 576, 576); }));
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w, 7, 1100, 130); }));
        const std::vector<uint16_t> w16 = random_weights<uint16_t>(1536 * 576, 2);
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w16, 1, 576, 1536); }));
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w16, 1, 1536, 576); }));
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w16, 33, 576, 576); }));
        CHECK(same_with_1_and_2_threads([&] { return run_matmul(kernels, x, w16, 7, 1100, 130); }));

        const AttentionBatch prefill = attention_batch(4, 2, 64, 16, {240}, 40, 3);
        CHECK(same_with_1_and_2_threads([&] { return prefill.run(kernels); }));
        const AttentionBatch decode = attention_batch(8, 4, 128, 16, {400, 700, 3, 1000}, 1, 4);
        CHECK(same_with_1_and_2_threads([&] { return decode.run(kernels); }));

        const int rows = 64, d = 4096;
        const std::vector<float> a = random_floats(rows * d, 5, -30.0f, 30.0f);
        const std::vector<float> b = random_floats(rows * d, 6);
        CHECK(same_with_1_and_2_threads([&] {
            std::vector<float> out = nan_filled(a.size());
            kernels.rmsnorm(out.data(), a.data(), b.data(), rows, d, 1e-5f);
            return out;
        }));
        CHECK(same_with_1_and_2_threads([&] {
            std::vector<float> out = nan_filled(a.size());
            kernels.swiglu(out.data(), a.data(), b.data(), static_cast<int64_t>(a.size()));
            return out;
        }));
        CHECK(same_with_1_and_2_threads([&] {
            std::vector<float> out = a;
            kernels.add(out.data(), b.data(), static_cast<int64_t>(a.size()));
            return out;
        }));
        CHECK(same_with_1_and_2_threads([&] {
            std::vector<float> out = a;  // 64 rows x 32 heads x 128
            kernels.rope(out.data(), b.data(), b.data() + rows * 64, rows, 32, 128, 128);
            return out;
        }));
        CHECK(same_with_1_and_2_threads([&] {
            // 256 rows of 8 kv heads x 128 into a cache of 16 blocks of 16 positions, as many floats as a.
            std::vector<float> k_cache(a.size(), 0.0f), v_cache = k_cache;
            std::vector<int64_t> slots(rows * 4);
            std::iota(slots.begin(), slots.end(), 0);
            std::shuffle(slots.begin(), slots.end(), std::mt19937(7));
            kernels.kv_append(k_cache.data(), v_cache.data(), a.data(), b.data(), slots.data(), rows * 4, 8, 128, 16);
            k_cache.insert(k_cache.end(), v_cache.begin(), v_cache.end());
            return k_cache;
        }));
    });
}

// ---- choosing a level ---------------------------------------------------------------------------------

TEST_CASE("supported levels start with portable and end with the best", "[dispatch]") {
    const std::vector<SimdLevel> supported = kvx::cpu::supported_simd_levels();
    REQUIRE(!supported.empty());
    CHECK(supported.front() == SimdLevel::portable);
    CHECK(supported.back() == kvx::cpu::best_simd_level());
    CHECK(std::string(kvx::cpu::simd_level_name(SimdLevel::portable)) == "portable");
    CHECK(std::string(kvx::cpu::simd_level_name(SimdLevel::avx2)) == "avx2");
    CHECK(std::string(kvx::cpu::simd_level_name(SimdLevel::avx512)) == "avx512");
    CHECK(std::string(kvx::cpu::simd_level_name(SimdLevel::avx512_vnni)) == "avx512vnni");
    for (SimdLevel level : kAllLevels) {
        const std::string name = kvx::cpu::simd_level_name(level);
        if (machine_runs(level)) {
            CHECK(kvx::cpu::cpu_kernels(level).name == "cpu-" + name);
        } else {
            CHECK_THROWS_WITH(kvx::cpu::cpu_kernels(level), Catch::Matchers::Contains(name));
        }
    }
}

TEST_CASE("a level is named as simd_level_name names it; another name is none", "[dispatch]") {
    for (SimdLevel level : kAllLevels) CHECK(kvx::cpu::simd_level_named(kvx::cpu::simd_level_name(level)) == level);
    for (const char* other : {"", "auto", "reference", "AVX2", "avx", "bogus"})
        CHECK_FALSE(kvx::cpu::simd_level_named(other).has_value());
}

TEST_CASE("a level the machine cannot run is refused with kvx::Error, in a sentence without a program prefix",
          "[dispatch]") {
    for (SimdLevel level : kAllLevels) {
        if (machine_runs(level)) continue;
        try {
            kvx::cpu::cpu_kernels(level);
            FAIL("cpu_kernels accepted a level this machine cannot run");
        } catch (const kvx::Error& e) {
            const std::string message = e.what();
            CHECK(message.find(kvx::cpu::simd_level_name(level)) != std::string::npos);
            CHECK(message.find("supported: portable") != std::string::npos);
            CHECK(message.rfind("kvx:", 0) == std::string::npos);
        }
    }
}

}  // namespace
