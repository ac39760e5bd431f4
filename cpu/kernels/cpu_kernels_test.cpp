// The CPU kernels against the reference kernels, on every SIMD level this machine runs.
//
// Shapes are chosen to be awkward: lengths that are not multiples of any vector width, ragged register
// tiles, every block size from 1 to 256, GQA, shuffled block tables, batches mixing a prefill chunk with
// decode rows of other sequences. Outputs are poisoned with NaN before each call, so a kernel that leaves
// part of its output unwritten fails.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
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

template <class W>
void check_matmul(const KernelTable& kernels, int n, int k, int m, uint32_t seed) {
    INFO("matmul n=" << n << " k=" << k << " m=" << m << (std::is_same_v<W, float> ? "" : " fp16 weights"));
    const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, seed);  // [n][k]
    const std::vector<W> w = random_weights<W>(static_cast<size_t>(m) * k, seed + 1);  // [m][k]
    CHECK_CLOSE(run_matmul(kernels, x, w, n, k, m), run_matmul(reference, x, w, n, k, m), kTolerance);
}

// W: the weights' storage, float (matmul) or uint16_t (matmul_f16, IEEE fp16 bits).
TEMPLATE_TEST_CASE("matmul matches the reference for awkward shapes", "[matmul]", float, uint16_t) {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 100;
        for (int n : {1, 2, 3, 5, 33})
            for (int k : {1, 3, 7, 17, 64, 172, 257, 576})
                for (int m : {1, 3, 7, 17, 64, 172, 257}) check_matmul<TestType>(kernels, n, k, m, ++seed);
    });
}

TEMPLATE_TEST_CASE("matmul matches the reference at model shapes and across k blocks", "[matmul]", float,
                   uint16_t) {
    for_each_level([](const KernelTable& kernels) {
        check_matmul<TestType>(kernels, 1, 576, 576, 1);     // SmolLM-135M projections, decode
        check_matmul<TestType>(kernels, 1, 1536, 576, 2);    // its down projection
        check_matmul<TestType>(kernels, 1, 576, 1536, 10);   // its gate and up projections
        check_matmul<TestType>(kernels, 1, 576, 49152, 3);   // its classifier
        check_matmul<TestType>(kernels, 1, 2048, 300, 4);    // TinyLlama-wide rows
        check_matmul<TestType>(kernels, 33, 576, 576, 5);    // a prefill chunk
        check_matmul<TestType>(kernels, 7, 1100, 300, 6);    // k spans 3 depth blocks, the last one ragged
        check_matmul<TestType>(kernels, 4, 1024, 130, 7);    // k exactly 2 depth blocks, w rows past one w block
        check_matmul<TestType>(kernels, 2, 0, 5, 8);         // k == 0: all zeros, still written
        check_matmul<TestType>(kernels, 1, 0, 5, 9);
    });
}

// Speculative decoding verifies draft tokens in one multi-row pass and needs each row's logits to be the
// bits a single-row decode step gives: the GEMM (n > 1) must compute a row exactly as the GEMV (n == 1)
// does, for k within one depth block, on a block boundary and across several, ragged or not.
TEMPLATE_TEST_CASE("matmul gives a row the same bits whatever the number of rows", "[matmul][rows]", float,
                   uint16_t) {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 700;
        for (int k : {1, 7, 64, 172, 511, 512, 513, 576, 1100, 1536})
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
        for (int k : {1, 7, 16, 17, 172, 511, 513, 576, 1100})
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

// ---- rmsnorm ------------------------------------------------------------------------------------------

TEST_CASE("rmsnorm matches the reference, also in place", "[rmsnorm]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 200;
        for (int n : {1, 2, 3, 5, 33}) {
            for (int d : {1, 3, 7, 17, 64, 172, 257, 576, 2048}) {
                INFO("rmsnorm n=" << n << " d=" << d);
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * d, ++seed, -3.0f, 3.0f);  // [n][d]
                const std::vector<float> weight = random_floats(d, ++seed);                                 // [d]
                std::vector<float> expected(x.size());
                reference.rmsnorm(expected.data(), x.data(), weight.data(), n, d, 1e-5f);

                std::vector<float> out = nan_filled(x.size());
                kernels.rmsnorm(out.data(), x.data(), weight.data(), n, d, 1e-5f);
                CHECK_CLOSE(out, expected, kTolerance);

                std::vector<float> in_place = x;
                kernels.rmsnorm(in_place.data(), in_place.data(), weight.data(), n, d, 1e-5f);
                CHECK_CLOSE(in_place, expected, kTolerance);
            }
        }
    });
}

TEST_CASE("layernorm matches the reference, also in place and for rows far from zero", "[layernorm]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 250;
        for (int n : {1, 2, 5, 33}) {
            for (int d : {1, 3, 7, 17, 64, 257, 576, 768}) {
                for (float offset : {0.0f, 100.0f}) {  // a large mean must not cancel the variance away
                    INFO("layernorm n=" << n << " d=" << d << " offset=" << offset);
                    std::vector<float> x = random_floats(static_cast<size_t>(n) * d, ++seed, -3.0f, 3.0f);  // [n][d]
                    for (float& v : x) v += offset;
                    const std::vector<float> weight = random_floats(d, ++seed);  // [d]
                    const std::vector<float> bias = random_floats(d, ++seed);    // [d]
                    std::vector<float> expected(x.size());
                    reference.layernorm(expected.data(), x.data(), weight.data(), bias.data(), n, d, 1e-5f);

                    std::vector<float> out = nan_filled(x.size());
                    kernels.layernorm(out.data(), x.data(), weight.data(), bias.data(), n, d, 1e-5f);
                    CHECK_CLOSE(out, expected, offset == 0.0f ? kTolerance : 1e-4);

                    std::vector<float> in_place = x;
                    kernels.layernorm(in_place.data(), in_place.data(), weight.data(), bias.data(), n, d, 1e-5f);
                    CHECK_CLOSE(in_place, expected, offset == 0.0f ? kTolerance : 1e-4);
                }
            }
        }
    });
}

// ---- rope ---------------------------------------------------------------------------------------------

void check_rope(const KernelTable& kernels, int n_rows, int n_heads, int head_dim, uint32_t seed, int rotary_dim = 0) {
    if (rotary_dim == 0) rotary_dim = head_dim;
    INFO("rope rows=" << n_rows << " heads=" << n_heads << " head_dim=" << head_dim << " rotary_dim=" << rotary_dim);
    const size_t half = static_cast<size_t>(rotary_dim) / 2;
    const std::vector<float> angles = random_floats(n_rows * half, seed, -10.0f, 10.0f);
    std::vector<float> cos(angles.size()), sin(angles.size());  // [n_rows][head_dim / 2]
    for (size_t i = 0; i < angles.size(); ++i) {
        cos[i] = std::cos(angles[i]);
        sin[i] = std::sin(angles[i]);
    }
    const std::vector<float> x = random_floats(static_cast<size_t>(n_rows) * n_heads * head_dim, seed + 1);
    std::vector<float> expected = x;  // [n_rows][n_heads][head_dim]
    reference.rope(expected.data(), cos.data(), sin.data(), n_rows, n_heads, head_dim, rotary_dim);
    std::vector<float> actual = x;
    kernels.rope(actual.data(), cos.data(), sin.data(), n_rows, n_heads, head_dim, rotary_dim);
    CHECK_CLOSE(actual, expected, kTolerance);
    // Partial rotary: the elements past rotary_dim of every head pass through bit for bit.
    for (size_t i = 0; i < x.size(); ++i)
        if (static_cast<int>(i % static_cast<size_t>(head_dim)) >= rotary_dim) REQUIRE(actual[i] == x[i]);
}

TEST_CASE("rope matches the reference", "[rope]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 300;
        for (int n_rows : {1, 3, 5})
            for (int n_heads : {1, 3, 8})
                for (int head_dim : {2, 8, 24, 64, 80, 128}) check_rope(kernels, n_rows, n_heads, head_dim, seed += 2);
    });
}

TEST_CASE("rope of the first rotary_dim elements matches the reference and leaves the rest", "[rope]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 350;
        for (int n_rows : {1, 5})
            for (auto [head_dim, rotary_dim] : {std::pair{16, 8}, {64, 16}, {80, 20}, {128, 64}, {24, 2}})
                check_rope(kernels, n_rows, 3, head_dim, seed += 2, rotary_dim);
    });
}

// ---- kv_append ----------------------------------------------------------------------------------------

// Rows go to shuffled slots of a 5-block cache, row 1 to slot -1. The cache must equal the reference's,
// and every slot no row names (so also the one row 1 would have had) must be untouched.
void check_kv_append(const KernelTable& kernels, int n_kv_heads, int head_dim, int block_size, uint32_t seed) {
    INFO("kv_append kv_heads=" << n_kv_heads << " head_dim=" << head_dim << " block_size=" << block_size);
    const int64_t n_slots = int64_t{5} * block_size;
    const int n_rows = static_cast<int>(std::min<int64_t>(6, n_slots));
    const size_t slot_floats = static_cast<size_t>(head_dim);
    const size_t cache_size = n_slots * n_kv_heads * slot_floats;  // [5][n_kv_heads][block_size][head_dim]
    const size_t rows_size = n_rows * n_kv_heads * slot_floats;    // [n_rows][n_kv_heads][head_dim]

    std::vector<int64_t> slots(n_slots);  // [n_rows] once cut below
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(seed));
    slots.resize(n_rows);
    if (n_rows > 1) slots[1] = -1;

    const std::vector<float> k = random_floats(rows_size, seed + 1);
    const std::vector<float> v = random_floats(rows_size, seed + 2);
    const std::vector<float> k_initial = random_floats(cache_size, seed + 3);
    const std::vector<float> v_initial = random_floats(cache_size, seed + 4);
    std::vector<float> k_expected = k_initial, v_expected = v_initial;
    reference.kv_append(k_expected.data(), v_expected.data(), k.data(), v.data(), slots.data(), n_rows, n_kv_heads,
                        head_dim, block_size);
    std::vector<float> k_actual = k_initial, v_actual = v_initial;
    kernels.kv_append(k_actual.data(), v_actual.data(), k.data(), v.data(), slots.data(), n_rows, n_kv_heads, head_dim,
                      block_size);
    CHECK(k_actual == k_expected);
    CHECK(v_actual == v_expected);

    auto untouched = [&](const std::vector<float>& actual, const std::vector<float>& initial, size_t at) {
        return std::equal(actual.begin() + at, actual.begin() + at + head_dim, initial.begin() + at);
    };
    for (int64_t slot = 0; slot < n_slots; ++slot) {
        if (std::find(slots.begin(), slots.end(), slot) != slots.end()) continue;
        const int64_t block = slot / block_size, offset = slot % block_size;
        for (int h = 0; h < n_kv_heads; ++h) {
            const auto at = static_cast<size_t>((block * n_kv_heads + h) * block_size + offset) * slot_floats;
            CHECK(untouched(k_actual, k_initial, at));
            CHECK(untouched(v_actual, v_initial, at));
        }
    }
}

TEST_CASE("kv_append writes each row into its slot and skips slot -1", "[kv_append]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 400;
        for (int n_kv_heads : {1, 3, 8})
            for (int head_dim : {8, 24, 64, 80, 128})
                for (int block_size : {1, 4, 16, 256})
                    check_kv_append(kernels, n_kv_heads, head_dim, block_size, seed += 5);
    });
}

// ---- paged_attention ----------------------------------------------------------------------------------

// A batch over a paged cache: sequence 0 contributes a prefill chunk (its last prefill_rows positions),
// every other sequence one decode row (its last position). Physical blocks are shuffled, a few are never
// referenced, and table entries past a sequence's end are -1.
struct AttentionBatch {
    int n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
    std::vector<int> seq_lengths;  // positions in the cache per sequence
    int prefill_rows = 1;
    int window = 0;  // PagedAttentionArgs::window

    int table_stride = 0;
    std::vector<float> q;             // [n_rows][n_heads][head_dim]
    std::vector<float> k_cache;       // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<float> v_cache;       // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<int32_t> tables;      // [n_seqs][table_stride]
    std::vector<int32_t> row_seq;     // [n_rows]
    std::vector<int32_t> row_pos;     // [n_rows]

    int n_rows() const { return static_cast<int>(row_seq.size()); }

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

    std::vector<uint16_t> k_cache_f16;  // k_cache as fp16 bits, once to_f16() has run
    std::vector<uint16_t> v_cache_f16;

    // The first position of sequence s that any of its rows sees.
    int first_seen(int s) const {
        int first = seq_lengths[static_cast<size_t>(s)];
        for (int r = 0; r < n_rows(); ++r)
            if (row_seq[r] == s) first = std::min(first, window > 0 ? std::max(0, row_pos[r] - window + 1) : 0);
        return first;
    }

    // Makes reading outside the window fail: every cached row of a position no row sees becomes NaN, and
    // the table entry of a block wholly before every row's window becomes -1 (a released block).
    void poison_outside_window() {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (int s = 0; s < static_cast<int>(seq_lengths.size()); ++s) {
            int32_t* table = tables.data() + static_cast<size_t>(s) * table_stride;
            for (int p = 0; p < first_seen(s); ++p) {
                const int32_t block = table[p / block_size];
                if (block < 0) continue;  // released already
                for (int h = 0; h < n_kv_heads; ++h) {
                    const size_t at = ((static_cast<size_t>(block) * n_kv_heads + h) * block_size + p % block_size) *
                                      static_cast<size_t>(head_dim);
                    std::fill_n(k_cache.begin() + static_cast<std::ptrdiff_t>(at), head_dim, nan);
                    std::fill_n(v_cache.begin() + static_cast<std::ptrdiff_t>(at), head_dim, nan);
                }
                if (p % block_size == block_size - 1) table[p / block_size] = -1;
            }
        }
    }

    // Rounds the cache to fp16 with the portable conversion, the input both the reference and the kernels
    // read for KvDtype::f16.
    void to_f16() {
        k_cache_f16.resize(k_cache.size());
        v_cache_f16.resize(v_cache.size());
        std::transform(k_cache.begin(), k_cache.end(), k_cache_f16.begin(), kvx::f32_to_f16);
        std::transform(v_cache.begin(), v_cache.end(), v_cache_f16.begin(), kvx::f32_to_f16);
    }

    std::vector<float> run(const KernelTable& kernels, KvDtype dtype = KvDtype::f32, float softcap = 0.0f) const {
        std::vector<float> out = nan_filled(q.size());
        PagedAttentionArgs args;
        args.q = q.data();
        args.k_cache = dtype == KvDtype::f16 ? static_cast<const void*>(k_cache_f16.data()) : k_cache.data();
        args.v_cache = dtype == KvDtype::f16 ? static_cast<const void*>(v_cache_f16.data()) : v_cache.data();
        args.kv_dtype = dtype;
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
        args.softcap = softcap;
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

TEST_CASE("paged_attention matches the reference for every block size and head dim", "[paged_attention]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 500;
        for (int head_dim : {8, 24, 64, 80, 128}) {
            for (int block_size = 1; block_size <= 256; block_size *= 2) {
                INFO("paged_attention head_dim=" << head_dim << " block_size=" << block_size);
                // Sequence lengths straddle block and chunk (64 keys) boundaries; one has a single key.
                const AttentionBatch batch =
                    attention_batch(2, 2, head_dim, block_size, {150, 1, 67, 300}, 5, ++seed);
                CHECK_CLOSE(batch.run(kernels), batch.run(reference), kTolerance);
            }
        }
    });
}

// Soft-caps near the scores' scale (Gemma 2's 50 on real logits; 0.5 and 2 here, where tanh bends), over an
// fp32 and an fp16 cache: the kernels agree with the reference, and differ from uncapped attention.
TEST_CASE("paged_attention with a logit soft-cap matches the reference", "[paged_attention][softcap]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 540;
        for (float cap : {0.5f, 2.0f})
            for (int block_size : {1, 16}) {
                INFO("softcap " << cap << " block_size=" << block_size);
                AttentionBatch batch = attention_batch(2, 2, 16, block_size, {70, 1, 12}, 5, ++seed);
                const std::vector<float> want = batch.run(reference, KvDtype::f32, cap);
                CHECK_CLOSE(batch.run(kernels, KvDtype::f32, cap), want, kTolerance);
                CHECK(want != batch.run(reference));
                batch.to_f16();
                CHECK_CLOSE(batch.run(kernels, KvDtype::f16, cap), batch.run(reference, KvDtype::f16, cap), kTolerance);
            }
    });
}

TEST_CASE("paged_attention matches the reference for GQA ratios", "[paged_attention]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 600;
        for (int group : {1, 2, 4, 8}) {
            for (int head_dim : {8, 64, 80}) {
                for (int block_size : {1, 16, 32}) {
                    INFO("paged_attention group=" << group << " head_dim=" << head_dim << " block_size=" << block_size);
                    const AttentionBatch batch =
                        attention_batch(3, group, head_dim, block_size, {90, 33, 4, 129, 64}, 7, ++seed);
                    CHECK_CLOSE(batch.run(kernels), batch.run(reference), kTolerance);
                }
            }
        }
    });
}

TEST_CASE("paged_attention of a single decode row and of a whole prompt", "[paged_attention]") {
    for_each_level([](const KernelTable& kernels) {
        // stories260K decoding: 8 heads over 4 KV heads of dim 8.
        const AttentionBatch decode = attention_batch(4, 2, 8, 16, {200}, 1, 700);
        CHECK_CLOSE(decode.run(kernels), decode.run(reference), kTolerance);
        // A prompt from position 0: the first row sees one key.
        const AttentionBatch prompt = attention_batch(2, 4, 64, 16, {70}, 70, 701);
        CHECK_CLOSE(prompt.run(kernels), prompt.run(reference), kTolerance);
    });
}

// ---- sliding window, fp16 cache, contiguous cache -----------------------------------------------------

TEST_CASE("paged_attention with a sliding window skips, and never reads, positions before it", "[window]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 1000;
        for (int block_size = 1; block_size <= 256; block_size *= 2) {
            // W = block_size and 2 block_size put the window's start exactly on a block boundary for the row
            // at 8 block_size - 1; W + 1 one position before it.
            for (int window : {1, 2, 37, 64, 65, block_size, block_size + 1, 2 * block_size}) {
                INFO("paged_attention window=" << window << " block_size=" << block_size);
                AttentionBatch batch = attention_batch(2, 2, 24, block_size, {150, 1, 67, 300, 8 * block_size}, 5, ++seed);
                batch.window = window;
                batch.poison_outside_window();
                CHECK_CLOSE(batch.run(kernels), batch.run(reference), kTolerance);
            }
        }
    });
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

TEST_CASE("paged_attention with a window matches the reference for GQA ratios and mixed batches", "[window]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 1200;
        for (int group : {1, 2, 4, 8}) {
            for (int head_dim : {8, 80}) {
                INFO("paged_attention window group=" << group << " head_dim=" << head_dim);
                // A 40-row prefill chunk: its rows' windows start at 40 different positions.
                AttentionBatch batch = attention_batch(2, group, head_dim, 16, {200, 5, 129, 48}, 40, ++seed);
                batch.window = 48;
                batch.poison_outside_window();
                CHECK_CLOSE(batch.run(kernels), batch.run(reference), kTolerance);
            }
        }
    });
}

// The reference reads the same fp16 values (widened exactly), so the tolerance is the fp32 one.
TEST_CASE("paged_attention over an fp16 cache matches the reference reading the same values", "[kv_f16]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 1300;
        for (int head_dim : {8, 24, 64, 80, 128}) {
            for (int block_size : {1, 3, 16, 256}) {
                for (int window : {0, 50}) {
                    INFO("paged_attention f16 head_dim=" << head_dim << " block_size=" << block_size << " window=" << window);
                    AttentionBatch batch = attention_batch(2, 4, head_dim, block_size, {150, 1, 67, 300}, 5, ++seed);
                    batch.window = window;
                    batch.poison_outside_window();
                    batch.to_f16();
                    CHECK_CLOSE(batch.run(kernels, KvDtype::f16), batch.run(reference, KvDtype::f16), kTolerance);
                }
            }
        }
    });
}

// Bit for bit against kernels/f16.h, including the values F16C could round differently: ties, subnormals,
// overflow to inf, infinities and NaN.
TEST_CASE("kv_append_f16 stores each value as f32_to_f16 does and skips slot -1", "[kv_f16]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 1400;
        for (int head_dim : {8, 13, 64, 80}) {
            for (int block_size : {1, 4, 16}) {
                INFO("kv_append_f16 head_dim=" << head_dim << " block_size=" << block_size);
                const int n_kv_heads = 3, n_blocks = 4;
                const int n_slots = n_blocks * block_size, n_rows = std::min(5, n_slots);
                std::vector<float> k = random_floats(static_cast<size_t>(n_rows) * n_kv_heads * head_dim, ++seed, -7e4f, 7e4f);
                std::vector<float> v = random_floats(k.size(), ++seed, -1e-4f, 1e-4f);  // many fp16 subnormals
                const float specials[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65520.0f, 1e-8f, -0.0f,
                                          std::numeric_limits<float>::infinity(),
                                          std::numeric_limits<float>::quiet_NaN(), 5.9604645e-8f, 2.9802322e-8f};
                for (size_t i = 0; i < std::size(specials); ++i) k[i * 3 % k.size()] = v[i * 5 % v.size()] = specials[i];

                std::vector<int64_t> slots(static_cast<size_t>(n_slots));  // [n_rows] once cut below
                std::iota(slots.begin(), slots.end(), 0);
                std::shuffle(slots.begin(), slots.end(), std::mt19937(seed));
                slots.resize(static_cast<size_t>(n_rows));
                if (n_rows > 1) slots[1] = -1;

                const size_t cache_size = static_cast<size_t>(n_slots) * n_kv_heads * head_dim;
                std::vector<uint16_t> k_expected(cache_size, 0x7777), v_expected = k_expected;
                reference.kv_append_f16(k_expected.data(), v_expected.data(), k.data(), v.data(), slots.data(), n_rows,
                                        n_kv_heads, head_dim, block_size);
                std::vector<uint16_t> k_actual(cache_size, 0x7777), v_actual = k_actual;
                kernels.kv_append_f16(k_actual.data(), v_actual.data(), k.data(), v.data(), slots.data(), n_rows,
                                      n_kv_heads, head_dim, block_size);
                CHECK(k_actual == k_expected);
                CHECK(v_actual == v_expected);
                // The reference itself against a direct conversion of row 0, and untouched slots.
                const int64_t block0 = slots[0] / block_size, offset0 = slots[0] % block_size;
                for (int j = 0; j < head_dim; ++j)
                    CHECK(k_expected[static_cast<size_t>((block0 * n_kv_heads * block_size + offset0) * head_dim + j)] ==
                          kvx::f32_to_f16(k[static_cast<size_t>(j)]));
                CHECK(std::count(k_actual.begin(), k_actual.end(), uint16_t{0x7777}) >=
                      static_cast<std::ptrdiff_t>((n_slots - n_rows + 1) * n_kv_heads * head_dim));
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

// ---- copy_blocks, reorder_beams -----------------------------------------------------------------------

// Caches of distinct random bytes, K unlike V, so that a copy from the wrong place or cache shows.
std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> bytes(n);
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
    return bytes;
}

TEST_CASE("copy_blocks copies every pair's block in K and V and nothing else", "[copy_blocks]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 1600;
        for (int threads : {1, 2}) {
            const ThreadCount scope(threads);
            for (int elem_bytes : {2, 4}) {
                for (int64_t block_elems : {int64_t{1}, int64_t{24}, int64_t{16 * 8 * 128}}) {
                    for (int n_pairs : {0, 1, 7, 40}) {
                        INFO("copy_blocks threads=" << threads << " elem_bytes=" << elem_bytes << " block_elems="
                                                    << block_elems << " pairs=" << n_pairs);
                        const int num_blocks = 2 * n_pairs + 3;
                        std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
                        std::iota(ids.begin(), ids.end(), 0);
                        std::shuffle(ids.begin(), ids.end(), std::mt19937(++seed));
                        std::vector<BlockCopy> pairs;  // sources and destinations disjoint
                        for (int i = 0; i < n_pairs; ++i) pairs.push_back({ids[static_cast<size_t>(i)], ids[static_cast<size_t>(n_pairs + i)]});
                        if (n_pairs > 1) pairs[1].src = pairs[0].src;  // a block forked twice

                        const size_t block_bytes = static_cast<size_t>(block_elems) * elem_bytes;
                        const std::vector<unsigned char> k = random_bytes(num_blocks * block_bytes, ++seed);
                        const std::vector<unsigned char> v = random_bytes(num_blocks * block_bytes, ++seed);
                        std::vector<unsigned char> k_actual = k, v_actual = v;
                        kernels.copy_blocks(k_actual.data(), v_actual.data(), pairs.data(), n_pairs, block_elems, elem_bytes);
                        std::vector<unsigned char> k_expected = k, v_expected = v;
                        reference.copy_blocks(k_expected.data(), v_expected.data(), pairs.data(), n_pairs, block_elems, elem_bytes);
                        CHECK(k_actual == k_expected);
                        CHECK(v_actual == v_expected);
                        // Recomputed here: destination blocks hold their source, every other block is as it was.
                        for (int b = 0; b < num_blocks; ++b) {
                            int32_t from = b;
                            for (const BlockCopy& pair : pairs)
                                if (pair.dst == b) from = pair.src;
                            CHECK(std::equal(k_actual.begin() + b * static_cast<std::ptrdiff_t>(block_bytes),
                                             k_actual.begin() + (b + 1) * static_cast<std::ptrdiff_t>(block_bytes),
                                             k.begin() + from * static_cast<std::ptrdiff_t>(block_bytes)));
                            CHECK(std::equal(v_actual.begin() + b * static_cast<std::ptrdiff_t>(block_bytes),
                                             v_actual.begin() + (b + 1) * static_cast<std::ptrdiff_t>(block_bytes),
                                             v.begin() + from * static_cast<std::ptrdiff_t>(block_bytes)));
                        }
                    }
                }
            }
        }
    });
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

// ---- swiglu, add --------------------------------------------------------------------------------------

// The engine needs well under 1e-6; 5e-7 (the polynomial exp gives about 2.5e-7) also catches a degraded exp.
TEST_CASE("swiglu matches the reference to 5e-7 relative, element by element", "[swiglu]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 800;
        for (int64_t n : {1, 3, 7, 17, 64, 172, 1000, 5003}) {
            INFO("swiglu n=" << n);
            std::vector<float> gate = random_floats(static_cast<size_t>(n), ++seed, -30.0f, 30.0f);
            // The ends of exp's range: overflow of e^-g, subnormal and flushed results.
            const float extremes[] = {0.0f,   -0.0f, 1e-8f,  -1e-8f,  87.0f, -87.0f,
                                      88.5f, -88.5f, 100.0f, -100.0f, -110.0f};
            for (size_t i = 0; i < std::size(extremes) && i < gate.size(); ++i) gate[i * 7 % gate.size()] = extremes[i];
            const std::vector<float> up = random_floats(static_cast<size_t>(n), ++seed, -2.0f, 2.0f);

            std::vector<float> expected(gate.size());
            reference.swiglu(expected.data(), gate.data(), up.data(), n);
            std::vector<float> out = nan_filled(gate.size());
            kernels.swiglu(out.data(), gate.data(), up.data(), n);
            for (size_t i = 0; i < out.size(); ++i) {
                INFO("gate " << gate[i] << " up " << up[i] << " expected " << expected[i] << " got " << out[i]);
                CHECK(std::fabs(out[i] - expected[i]) <= 5e-7 * std::fabs(expected[i]) + 1e-30);
            }

            std::vector<float> in_place = gate;  // out aliasing gate
            kernels.swiglu(in_place.data(), in_place.data(), up.data(), n);
            CHECK_CLOSE(in_place, expected, 5e-7);
        }
    });
}

// Relative to 1e-6 times the condition number of the result: e^(-2u) amplifies the fp32 rounding of u by
// |2u|, which matters only in the far negative tail, where the outputs are below 1e-10.
TEST_CASE("gelu_tanh matches the reference to 1e-6 x its condition, element by element", "[gelu]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 850;
        for (int64_t n : {1, 3, 7, 17, 64, 1000, 5003}) {
            INFO("gelu_tanh n=" << n);
            std::vector<float> x = random_floats(static_cast<size_t>(n), ++seed, -12.0f, 12.0f);
            const float extremes[] = {0.0f, -0.0f, 1e-8f, -1e-8f, 5.0f, -5.0f, 30.0f, -30.0f, 1e4f, -1e4f};
            for (size_t i = 0; i < std::size(extremes) && i < x.size(); ++i) x[i * 7 % x.size()] = extremes[i];

            std::vector<float> expected(x.size());
            reference.gelu_tanh(expected.data(), x.data(), n);
            std::vector<float> out = nan_filled(x.size());
            kernels.gelu_tanh(out.data(), x.data(), n);
            for (size_t i = 0; i < out.size(); ++i) {
                const double v = x[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
                const double condition = 2.0 + 2.0 * std::fabs(u);
                INFO("x " << x[i] << " expected " << expected[i] << " got " << out[i]);
                CHECK(std::fabs(out[i] - expected[i]) <= 1e-6 * condition * std::fabs(expected[i]) + 1e-30);
            }
            std::vector<float> in_place = x;
            kernels.gelu_tanh(in_place.data(), in_place.data(), n);
            CHECK_CLOSE(in_place, expected, 2e-6);
        }
    });
}

TEST_CASE("geglu_tanh matches the reference, also in place", "[gelu]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 870;
        for (int64_t n : {1, 3, 7, 17, 64, 1000, 5003}) {
            INFO("geglu_tanh n=" << n);
            const std::vector<float> gate = random_floats(static_cast<size_t>(n), ++seed, -8.0f, 8.0f);
            const std::vector<float> up = random_floats(static_cast<size_t>(n), ++seed, -2.0f, 2.0f);
            std::vector<float> expected(gate.size());
            reference.geglu_tanh(expected.data(), gate.data(), up.data(), n);
            std::vector<float> out = nan_filled(gate.size());
            kernels.geglu_tanh(out.data(), gate.data(), up.data(), n);
            CHECK_CLOSE(out, expected, 2e-6);
            std::vector<float> in_place = up;  // out aliasing up
            kernels.geglu_tanh(in_place.data(), gate.data(), in_place.data(), n);
            CHECK_CLOSE(in_place, expected, 2e-6);
        }
    });
}

TEST_CASE("gelu_erf and softcap match the reference", "[gelu][softcap]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 880;
        for (int64_t n : {1, 7, 64, 5003}) {
            INFO("n=" << n);
            const std::vector<float> x = random_floats(static_cast<size_t>(n), ++seed, -10.0f, 10.0f);
            std::vector<float> expected(x.size()), out = nan_filled(x.size());
            reference.gelu_erf(expected.data(), x.data(), n);
            kernels.gelu_erf(out.data(), x.data(), n);
            CHECK_CLOSE(out, expected, 2e-6);
            for (float cap : {0.5f, 3.0f, 50.0f}) {
                std::vector<float> want = x, got = x;
                reference.softcap(want.data(), n, cap);
                kernels.softcap(got.data(), n, cap);
                CHECK_CLOSE(got, want, 2e-6);
                for (float v : got) CHECK(std::fabs(v) <= cap);
            }
        }
    });
}

TEST_CASE("clamp and scale match the reference bit for bit, NaN and infinities included", "[clamp][scale]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 890;
        const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
        // Long enough for a parallel region (kMinParallelElements), short and ragged for the partial vectors.
        const int64_t lengths[] = {1, 3, 7, 17, 64, 1000, 5003, int64_t{1} << 18};
        for (int64_t n : lengths) {
            INFO("n=" << n);
            std::vector<float> x = random_floats(static_cast<size_t>(n), ++seed, -20.0f, 20.0f);
            for (size_t i = 0; i < x.size(); i += 7) x[i] = i % 3 == 0 ? nan : i % 3 == 1 ? inf : -inf;
            // The first index where the level and the reference differ (NaN against NaN: the same), or -1.
            auto first_difference = [](const std::vector<float>& got, const std::vector<float>& want) {
                for (size_t i = 0; i < got.size(); ++i)
                    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]) &&
                        !(std::isnan(got[i]) && std::isnan(want[i])))
                        return static_cast<int64_t>(i);
                return int64_t{-1};
            };
            for (float c : {0.5f, 8.0f, 1e30f}) {
                INFO("clamp c=" << c);
                std::vector<float> want = x, got = x;
                reference.clamp(want.data(), n, c);
                kernels.clamp(got.data(), n, c);
                CHECK(first_difference(got, want) == -1);  // exact: every output an input or a bound
                CHECK(std::all_of(got.begin(), got.end(), [c](float v) { return std::isnan(v) || std::fabs(v) <= c; }));
                CHECK(std::count_if(got.begin(), got.end(), [](float v) { return std::isnan(v); }) ==
                      std::count_if(x.begin(), x.end(), [](float v) { return std::isnan(v); }));
            }
            for (float s : {0.125f, 0.22f, 12.0f}) {
                INFO("scale s=" << s);
                std::vector<float> want = x, got = x;
                reference.scale(want.data(), n, s);
                kernels.scale(got.data(), n, s);
                CHECK(first_difference(got, want) == -1);  // one fp32 product each
            }
        }
    });
}

TEST_CASE("add_bias adds the bias to every row", "[add]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 880;
        for (int n : {1, 2, 7, 64}) {
            for (int d : {1, 5, 16, 17, 576, 2305}) {
                INFO("add_bias n=" << n << " d=" << d);
                const std::vector<float> x = random_floats(static_cast<size_t>(n) * d, ++seed);  // [n][d]
                const std::vector<float> bias = random_floats(d, ++seed);                      // [d]
                std::vector<float> expected = x, out = x;
                reference.add_bias(expected.data(), bias.data(), n, d);
                kernels.add_bias(out.data(), bias.data(), n, d);
                CHECK(out == expected);  // one fp32 add per element: bit-exact
            }
        }
    });
}

TEST_CASE("add matches the reference", "[add]") {
    for_each_level([](const KernelTable& kernels) {
        uint32_t seed = 900;
        for (int64_t n : {1, 3, 7, 17, 64, 172, 1000, 5003}) {
            INFO("add n=" << n);
            const std::vector<float> x = random_floats(static_cast<size_t>(n), ++seed);
            const std::vector<float> y = random_floats(static_cast<size_t>(n), ++seed);
            std::vector<float> expected = x, actual = x;
            reference.add(expected.data(), y.data(), n);
            kernels.add(actual.data(), y.data(), n);
            CHECK(actual == expected);
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
