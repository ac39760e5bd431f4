// The matrix products of the table: matmul (fp32), matmul_f16, matmuls (fp32, fp16 rows and fp16 row groups
// in one call) and matmul_q (q8 / q4, every offset and scale type, both x roundings, rows and row groups).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/f16_row_groups.h"
#include "kernels/quant_row_groups.h"
#include "tests/kernel_ops/op_inputs.h"
#include "tests/kernel_ops/op_table.h"

namespace kvx::ops {
namespace {

const KernelTable& reference = reference_kernels();

bool fits_rows(const Implementation& impl, const Shape& s) { return impl.max_matmul_rows == 0 || s.n <= impl.max_matmul_rows; }

// Weights [m][k] as fp16 bits, every 61st one scaled into fp16's subnormal range.
std::vector<uint16_t> f16_weights(size_t n, uint32_t seed) {
    std::vector<float> w = random_floats(n, seed);
    for (size_t i = 0; i < n; i += 61) w[i] *= 1e-5f;
    return to_f16(w);
}

template <class W>
Verdict check_matmul(const Implementation& impl, const Shape& s, uint32_t seed) {
    constexpr bool f16 = std::is_same_v<W, uint16_t>;
    const size_t nk = static_cast<size_t>(s.n) * static_cast<size_t>(s.k), mk = static_cast<size_t>(s.m) * static_cast<size_t>(s.k);
    const Placed<float> x(random_floats(nk, seed), s.misaligned);  // [n][k]
    const Placed<W> w([&] {
        if constexpr (f16) return f16_weights(mk, seed + 1);
        else return random_floats(mk, seed + 1);
    }(), s.misaligned);  // [m][k]
    const size_t nm = static_cast<size_t>(s.n) * static_cast<size_t>(s.m);
    const char* op = f16 ? "matmul_f16" : "matmul";
    const std::vector<float>& want = oracle_once(op, s, seed, [&] {
        std::vector<float> out(nm);  // [n][m]
        if constexpr (f16) reference.matmul_f16(out.data(), x.data(), w.data(), s.n, s.k, s.m);
        else reference.matmul(out.data(), x.data(), w.data(), s.n, s.k, s.m);
        return out;
    });
    std::vector<float> got = nan_filled(nm);  // [n][m]
    if constexpr (f16) impl.table.matmul_f16(got.data(), x.data(), w.data(), s.n, s.k, s.m);
    else impl.table.matmul(got.data(), x.data(), w.data(), s.n, s.k, s.m);
    return compare(op, impl, got, want);
}

// The widths of matmuls' three parts: fp32 m, fp16 rows 13, fp16 row groups 9 (a padded group).
Verdict check_matmuls(const Implementation& impl, const Shape& s, uint32_t seed) {
    const int widths[3] = {s.m, 13, 9};
    const std::vector<float> x = random_floats(static_cast<size_t>(s.n) * static_cast<size_t>(s.k), seed);  // [n][k]
    const std::vector<float> w0 = random_floats(static_cast<size_t>(widths[0]) * static_cast<size_t>(s.k), seed + 1);
    const std::vector<uint16_t> w1 = f16_weights(static_cast<size_t>(widths[1]) * static_cast<size_t>(s.k), seed + 2);
    const std::vector<uint16_t> w2 = f16_weights(static_cast<size_t>(widths[2]) * static_cast<size_t>(s.k), seed + 3);
    std::vector<uint16_t> groups(f16_row_groups_elems(widths[2], s.k));
    copy_to_f16_row_groups(w2.data(), widths[2], s.k, groups.data());
    auto run = [&](const KernelTable& table) {
        std::vector<float> out[3];  // out[p]: [n][widths[p]]
        for (int p = 0; p < 3; ++p) out[p] = nan_filled(static_cast<size_t>(s.n) * static_cast<size_t>(widths[p]));
        const MatmulPart parts[3] = {{.out = out[0].data(), .w_f32 = w0.data(), .m = widths[0]},
                                     {.out = out[1].data(), .w_f16 = w1.data(), .m = widths[1]},
                                     {.out = out[2].data(), .w_f16_groups = groups.data(), .m = widths[2]}};
        table.matmuls(parts, 3, x.data(), s.n, s.k);
        std::vector<float> all;  // the parts one after another
        for (const std::vector<float>& o : out) all.insert(all.end(), o.begin(), o.end());
        return all;
    };
    return compare("matmuls", impl, run(impl.table), run(reference));
}

// The elements one scale of x covers: 256 for ggml_k (llama.cpp's Q8_K), else 32.
int x_group(QuantXRounding rounding) { return rounding == QuantXRounding::ggml_k ? 256 : 32; }

// x rounded as a SIMD level rounds it for matmul_q (kernels.h): per group of 32, q = rint(x / (amax / 127)) and
// x~ = q * (amax / 127); for ggml q = rint(x * (127 / amax)) and x~ = q * fp16(amax / 127); for ggml_k, per 256,
// with m the first element of largest |x|, q = min(127, rint(x * (-127 / m))) and x~ = q / (-127 / m).
std::vector<double> rounded_x(const std::vector<float>& x, int n, int k, QuantXRounding rounding) {
    std::vector<double> out(x.size());
    if (rounding == QuantXRounding::ggml_k) {
        for (int i = 0; i < n; ++i)
            for (int g = 0; g * 256 < k; ++g) {
                const float* xs = x.data() + int64_t{i} * k + g * 256;
                const int valid = std::min(256, k - g * 256);
                float amax = 0.0f, m = 0.0f;
                for (int t = 0; t < valid; ++t)
                    if (std::fabs(xs[t]) > amax) amax = std::fabs(xs[t]), m = xs[t];
                const float iscale = amax > 0.0f ? -127.0f / m : 0.0f;
                for (int t = 0; t < valid; ++t) {
                    const float q = std::min(127.0f, std::nearbyint(iscale * xs[t]));
                    out[static_cast<size_t>(int64_t{i} * k + g * 256 + t)] = amax > 0.0f ? q * double{1.0f / iscale} : 0.0;
                }
            }
        return out;
    }
    for (int i = 0; i < n; ++i)
        for (int g = 0; g * 32 < k; ++g) {
            const float* xs = x.data() + int64_t{i} * k + g * 32;
            const int valid = std::min(32, k - g * 32);
            float amax = 0.0f;
            for (int t = 0; t < valid; ++t) amax = std::max(amax, std::fabs(xs[t]));
            const float scale = amax / 127.0f;
            const bool ggml = rounding == QuantXRounding::ggml;
            const double used_scale = ggml ? f16_to_f32(f32_to_f16(scale)) : scale;
            for (int t = 0; t < valid; ++t) {
                const float q = ggml ? std::nearbyint(xs[t] * (127.0f / amax)) : std::nearbyint(xs[t] / scale);
                out[static_cast<size_t>(int64_t{i} * k + g * 32 + t)] = amax > 0.0f ? q * used_scale : 0.0;
            }
        }
    return out;
}

// Two oracles (tolerances.cpp): the reference (exact x) within the rounding bound kernels.h documents, and
// the harness's own product in double of x as impl takes it (rounded or exact) with the weights decoded from
// the format, within fp32 summation, which a wrong nibble, scale, zero point or block boundary far exceeds.
Verdict check_matmul_q(const Implementation& impl, const Shape& s, uint32_t seed) {
    const QuantForm& f = s.quant;
    RandomQuant r(s.m, s.k, f.bits, f.block, f.offset, f.scales, seed, f.six_bit_values);
    r.w.x_rounding = f.x_rounding;
    std::unique_ptr<QuantRowGroups> groups = f.row_groups ? std::make_unique<QuantRowGroups>(r.w, s.m) : nullptr;
    const QuantMatrix& w = groups ? groups->matrix() : r.w;
    const std::vector<float> x = random_floats(static_cast<size_t>(s.n) * static_cast<size_t>(s.k), seed + 7);  // [n][k]
    const std::vector<double> xr = rounded_x(x, s.n, s.k, f.x_rounding);
    const bool ggml = f.x_rounding == QuantXRounding::ggml;
    const size_t nm = static_cast<size_t>(s.n) * static_cast<size_t>(s.m);
    std::vector<float> as_taken(nm);  // the harness's product, as float
    std::vector<double> fp32_bound(nm), rounding_bound(nm);
    // amax[i * x_groups + g]: the largest |x| of row i's group g (32 elements, or 256 for ggml_k), [n][x_groups].
    const int group = x_group(f.x_rounding);
    const int x_groups = (s.k + group - 1) / group;
    std::vector<float> amax(static_cast<size_t>(s.n) * static_cast<size_t>(x_groups), 0.0f);
    for (int i = 0; i < s.n; ++i)
        for (int j = 0; j < s.k; ++j) {
            float& a = amax[static_cast<size_t>(int64_t{i} * x_groups + j / group)];
            a = std::max(a, std::fabs(x[static_cast<size_t>(int64_t{i} * s.k + j)]));
        }
    for (int i = 0; i < s.n; ++i)
        for (int row = 0; row < s.m; ++row) {
            double dot = 0, abs_sum = 0, rounding = 0;
            for (int j = 0; j < s.k; ++j) {
                const auto at = static_cast<size_t>(int64_t{i} * s.k + j);
                const double wj = r.weight(row, j);
                dot += (impl.rounds_quant_x ? xr[at] : x[at]) * wj;
                abs_sum += std::fabs(x[at] * wj);
                // half a step of x's grid, and for ggml the fp16 scale's error over up to 127 steps
                rounding += std::fabs(wj) * amax[static_cast<size_t>(int64_t{i} * x_groups + j / group)] *
                            (1.0 / 254.0 + (ggml ? 1.0 / 2048.0 : 0.0));
            }
            const size_t o = static_cast<size_t>(int64_t{i} * s.m + row);
            as_taken[o] = static_cast<float>(dot);
            fp32_bound[o] = 1e-6 * (abs_sum + 1e-3) * (4 + s.k / 32.0);
            rounding_bound[o] = (impl.rounds_quant_x ? rounding * 1.0001 : 0.0) + fp32_bound[o] + std::fabs(dot) * 1e-7;
        }
    std::vector<float> want(nm), got = nan_filled(nm);
    reference.matmul_q(want.data(), x.data(), w, s.n, s.k, s.m);
    impl.table.matmul_q(got.data(), x.data(), w, s.n, s.k, s.m);
    for (double& b : fp32_bound) b += 1e-30;
    Verdict tight = compare("matmul_q", impl, got, as_taken, fp32_bound);
    if (!tight.pass) tight.detail = "against x as taken and the decoded weights: " + tight.detail;
    return first_failure({compare("matmul_q", impl, got, want, rounding_bound), tight});
}

std::vector<Shape> matmul_shapes() {
    std::vector<Shape> shapes;
    auto add = [&](int n, int k, int m, const std::string& note = "", int misaligned = 0) {
        shapes.push_back({.label = "n " + std::to_string(n) + " k " + std::to_string(k) + " m " + std::to_string(m) +
                                   (misaligned ? " misaligned" : "") + (note.empty() ? "" : " (" + note + ")"),
                          .n = n, .k = k, .m = m, .misaligned = misaligned != 0});
    };
    // n: the GEMV (1), its batched tiles, kGemvMaxRows (8) and one past it, a GEMM; k: off every vector width,
    // 16-element chunk and depth block (1024), and across several; m: off the 8-row groups and register tiles.
    for (int n : {1, 2, 3, 5, 8, 9, 33})
        for (int k : {1, 7, 17, 64, 257, 576, 1025, 2049})
            for (int m : {1, 3, 17, 64, 257}) add(n, k, m);
    add(2, 0, 5, "k 0: zeros, still written");
    add(1, 576, 576, "SmolLM2-135M q/o projection");
    add(1, 576, 192, "SmolLM2-135M k/v projection");
    add(1, 576, 1536, "SmolLM2-135M gate/up");
    add(1, 1536, 576, "SmolLM2-135M down");
    add(1, 576, 49152, "SmolLM2-135M classifier");
    add(9, 576, 1536, "SmolLM2-135M prefill chunk");
    add(1, 640, 1024, "Gemma 3 270M q projection");
    add(1, 640, 256, "Gemma 3 270M k/v projection");
    add(1, 640, 2048, "Gemma 3 270M gate/up");
    add(1, 2048, 640, "Gemma 3 270M down");
    add(7, 640, 2048, "Gemma 3 270M prefill chunk");
    for (int n : {1, 2, 4, 7})
        for (int k : {576, 1536}) add(n, k, 49, "", 1);
    return shapes;
}

std::vector<Shape> matmuls_shapes() {
    std::vector<Shape> shapes;
    // n 2 .. 64: the batched GEMV; 65: the GEMM. k off 16 (padded chunks) and off a depth block.
    for (int n : {1, 3, 9, 65})
        for (int k : {1, 17, 64, 513, 576, 1025})
            for (int m : {7, 576})
                shapes.push_back({.label = "n " + std::to_string(n) + " k " + std::to_string(k) + " parts fp32 " +
                                           std::to_string(m) + ", fp16 13, fp16 groups 9",
                                  .n = n, .k = k, .m = m});
    return shapes;
}

std::string quant_label(int n, int k, int m, const QuantForm& f, const std::string& note) {
    const char* offsets[] = {"none", "zero points", "mins"};
    return "n " + std::to_string(n) + " k " + std::to_string(k) + " m " + std::to_string(m) + " q" + std::to_string(f.bits) +
           " block " + std::to_string(f.block) + " offset " + offsets[static_cast<int>(f.offset)] +
           (f.scales == QuantScales::f32 ? " fp32 scales" : f.scales == QuantScales::f16 ? " fp16 scales" : " int8 scales of fp16 bases") + (f.six_bit_values ? " six-bit values" : "") + (f.x_rounding == QuantXRounding::ggml ? " x as ggml" : f.x_rounding == QuantXRounding::ggml_k ? " x as ggml Q8_K" : "") +
           (f.row_groups ? " row groups" : "") + (note.empty() ? "" : " (" + note + ")");
}

std::vector<Shape> matmul_q_shapes() {
    std::vector<Shape> shapes;
    auto add = [&](int n, int k, int m, QuantForm f, const std::string& note = "") {
        shapes.push_back({.label = quant_label(n, k, m, f, note), .n = n, .k = k, .m = m, .quant = f});
    };
    const QuantOffset offsets[] = {QuantOffset::none, QuantOffset::zero_points, QuantOffset::mins};
    constexpr QuantScales kF32 = QuantScales::f32, kF16 = QuantScales::f16, kI8 = QuantScales::i8_of_f16;
    const QuantScales kScaleTypes[] = {kF32, kF16, kI8};
    // Every form the format allows, at a k that leaves a partial block.
    for (int bits : {4, 8})
        for (int block : {16, 32, 64, 128, 256})
            for (QuantOffset offset : offsets)
                for (QuantScales scales : kScaleTypes) add(2, 300, 13, {bits, block, offset, scales});
    // llama.cpp's Q8_0, Q4_0 and Q4_1, x rounded as ggml rounds it.
    for (QuantForm f : {QuantForm{8, 32, QuantOffset::none, kF16}, QuantForm{4, 32, QuantOffset::none, kF16},
                        QuantForm{4, 32, QuantOffset::mins, kF16}})
        for (int n : {1, 5})
            for (int k : {32, 100, 576}) {
                f.x_rounding = QuantXRounding::ggml;
                add(n, k, 19, f);
            }
    // GGUF's K-quants and IQ4_XS as kvx keeps them (engine/model/gguf_matrix.h), x rounded as llama.cpp's Q8_K:
    // Q4_K, Q5_K, Q6_K / Q3_K, Q2_K, IQ4_XS; k off 256 too.
    for (QuantForm f : {QuantForm{4, 32, QuantOffset::mins, kI8}, QuantForm{8, 32, QuantOffset::mins, kI8},
                        QuantForm{8, 16, QuantOffset::none, kI8}, QuantForm{4, 16, QuantOffset::mins, kI8},
                        QuantForm{8, 32, QuantOffset::none, kI8}})
        for (int n : {1, 5})
            for (int k : {256, 300, 768}) {
                f.x_rounding = QuantXRounding::ggml_k;
                add(n, k, 19, f);
            }
    add(1, 640, 1024, {4, 32, QuantOffset::mins, kI8, QuantXRounding::ggml_k}, "Gemma 3 270M Q4_K wo");
    add(1, 2048, 640, {8, 16, QuantOffset::none, kI8, QuantXRounding::ggml_k}, "Gemma 3 270M Q6_K down");
    // Awkward sizes: k off 16, 32 and 256, ragged tiles, n past kGemvMaxRows; the forms in turn.
    int turn = 0;
    for (int n : {1, 2, 3, 5, 8, 9})
        for (int k : {1, 15, 16, 17, 33, 100, 520, 1000})
            for (int m : {1, 5, 13}) {
                ++turn;
                add(n, k, m, {turn % 2 ? 4 : 8, turn % 3 == 0 ? 16 : 32, offsets[turn % 3], kScaleTypes[turn / 2 % 3]});
            }
    // Row groups (q4 and q8, block 32, the format's zero or minimums): padded groups (m off 8), every scale
    // type, all roundings (ggml_k: a GGUF's Q8_0 and Q4_K matrices).
    for (int bits : {4, 8})
        for (QuantOffset offset : {QuantOffset::none, QuantOffset::mins})
            for (int n : {1, 3, 9})
                for (int k : {33, 576})
                    for (int m : {7, 29})
                        for (QuantScales scales : kScaleTypes)
                            add(n, k, m, {bits, 32, offset, scales, scales == kF16 ? QuantXRounding::ggml : QuantXRounding::onnxruntime, true});
    add(5, 300, 13, {8, 32, QuantOffset::none, kF16, QuantXRounding::ggml_k, true});
    add(5, 300, 13, {4, 32, QuantOffset::mins, kI8, QuantXRounding::ggml_k, true}, "Q4_K in row groups");
    // x past one block of rows (quant_row_groups.inc's row_group_x_block: 32 rows at k 16384), 3 groups (the
    // AVX-512 tiles' second pair half padding); Q6_K's blocks of 16 in row groups, five groups.
    add(40, 16384, 24, {4, 32, QuantOffset::mins, kI8, QuantXRounding::ggml_k, true}, "x in two blocks of rows");
    add(9, 576, 40, {8, 16, QuantOffset::none, kI8, QuantXRounding::ggml_k, true}, "Q6_K in row groups");
    for (int n : {1, 3, 9})
        for (int k : {33, 300, 768})
            for (QuantOffset offset : {QuantOffset::none, QuantOffset::mins})
                for (QuantScales scales : {kF32, kI8})
                    add(n, k, 29, {8, 16, offset, scales, QuantXRounding::ggml_k, true}, "q8 block 16 in row groups");
    add(9, 576, 13, {8, 16, QuantOffset::none, kF16, QuantXRounding::ggml, true}, "q8 block 16, fp16 scales");
    // Q6_K in its 6 bits (q6 row groups): groups padded, two x blocks of rows, the GEMV and a prefill's rows.
    for (auto [n, k, m] : {std::tuple{1, 2048, 640}, std::tuple{5, 300, 13}, std::tuple{9, 768, 40}, std::tuple{40, 16384, 24},
                           std::tuple{37, 16384, 24}})
        add(n, k, m, {8, 16, QuantOffset::none, kI8, QuantXRounding::ggml_k, true, true}, "Q6_K as q6 row groups");
    // IQ4_XS as kvx keeps it (q8, block 32, int8 scales, no minimums), x per 256: a sum per base.
    for (int n : {1, 9, 37})
        add(n, 768, 29, {8, 32, QuantOffset::none, kI8, QuantXRounding::ggml_k, true}, "IQ4_XS in row groups");
    add(33, 640, 40, {8, 32, QuantOffset::none, kF16, QuantXRounding::ggml, true}, "q8 row groups, a prefill's rows");
    add(1, 576, 576, {4, 32, QuantOffset::none, kF16}, "SmolLM2-135M Q4_0 decode");
    add(1, 1536, 576, {8, 32, QuantOffset::none, kF16, QuantXRounding::ggml}, "SmolLM2-135M Q8_0 down");
    add(7, 576, 1536, {4, 32, QuantOffset::mins, kF16}, "SmolLM2-135M Q4_1 prefill");
    add(1, 576, 1536, {4, 32, QuantOffset::none, kF32, QuantXRounding::onnxruntime, true}, "SmolLM2-135M gate, row groups");
    add(3, 576, 200, {4, 128, QuantOffset::zero_points, kF32}, "MatMulNBits asymmetric");
    add(1, 640, 2048, {4, 32, QuantOffset::none, kF16, QuantXRounding::ggml}, "Gemma 3 270M Q4_0 gate");
    add(1, 2048, 640, {8, 32, QuantOffset::none, kF16, QuantXRounding::ggml}, "Gemma 3 270M Q8_0 down");
    add(8, 4160, 40, {4, 32, QuantOffset::none, kF16}, "many vectors per lane");
    return shapes;
}

}  // namespace

std::vector<Op> matmul_ops() {
    return {
        {"matmul", matmul_shapes(),
         [](const Implementation& impl, const Shape& s) { return impl.table.matmul != nullptr && fits_rows(impl, s); },
         check_matmul<float>},
        {"matmul_f16", matmul_shapes(),
         [](const Implementation& impl, const Shape& s) { return impl.table.matmul_f16 != nullptr && fits_rows(impl, s); },
         check_matmul<uint16_t>},
        {"matmuls", matmuls_shapes(),
         [](const Implementation& impl, const Shape&) { return impl.table.matmuls != nullptr; }, check_matmuls},
        {"matmul_q", matmul_q_shapes(),
         [](const Implementation& impl, const Shape& s) {
             return impl.table.matmul_q != nullptr && fits_rows(impl, s) && (!s.quant.row_groups || impl.reads_quant_row_groups);
         },
         check_matmul_q, true},
    };
}

}  // namespace kvx::ops
