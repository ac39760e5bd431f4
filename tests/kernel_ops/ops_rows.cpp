// The per-row ops of the table: rmsnorm, layernorm (both also in place) and rope (whole and partial rotary).
#include <cmath>
#include <string>

#include "tests/kernel_ops/op_inputs.h"
#include "tests/kernel_ops/op_table.h"

namespace kvx::ops {
namespace {

const KernelTable& reference = reference_kernels();

std::string rows_label(const Shape& s) {
    return "n " + std::to_string(s.n) + " d " + std::to_string(s.k) + (s.param != 0.0f ? " rows around " + std::to_string(int(s.param)) : "") +
           (s.in_place ? " in place" : "") + (s.misaligned ? " misaligned" : "");
}

// x [n][d] in [-3, 3) (+ param), weight and bias [d]; out [n][d] poisoned, or x itself in place.
Verdict check_norm(const Implementation& impl, const Shape& s, uint32_t seed, bool layer) {
    const size_t count = static_cast<size_t>(s.n) * static_cast<size_t>(s.k);
    std::vector<float> x_values = random_floats(count, seed, -3.0f, 3.0f);
    for (float& v : x_values) v += s.param;
    const Placed<float> weight(random_floats(static_cast<size_t>(s.k), seed + 1), s.misaligned);
    const Placed<float> bias(random_floats(static_cast<size_t>(s.k), seed + 2), s.misaligned);
    std::vector<float> want(count);
    if (layer)
        reference.layernorm(want.data(), x_values.data(), weight.data(), bias.data(), s.n, s.k, 1e-5f);
    else
        reference.rmsnorm(want.data(), x_values.data(), weight.data(), s.n, s.k, 1e-5f);
    Placed<float> x(x_values, s.misaligned), out(nan_filled(count), s.misaligned);
    float* to = s.in_place ? x.data() : out.data();
    if (layer)
        impl.table.layernorm(to, x.data(), weight.data(), bias.data(), s.n, s.k, 1e-5f);
    else
        impl.table.rmsnorm(to, x.data(), weight.data(), s.n, s.k, 1e-5f);
    const std::vector<float> got = s.in_place ? x.values() : out.values();
    if (!layer) return compare("rmsnorm", impl, got, want);
    // LayerNorm's x - mean loses bits as |mean| / std grows (tolerances.cpp).
    double max_want = 1.0;
    for (float w : want) max_want = std::max(max_want, std::fabs(double{w}));
    std::vector<double> bound(count);
    for (int i = 0; i < s.n; ++i) {
        double sum = 0, squares = 0;
        for (int j = 0; j < s.k; ++j) sum += x_values[static_cast<size_t>(i * s.k + j)];
        const double mean = sum / s.k;
        for (int j = 0; j < s.k; ++j) squares += std::pow(x_values[static_cast<size_t>(i * s.k + j)] - mean, 2);
        const double std_dev = std::sqrt(squares / s.k + 1e-5);
        for (int j = 0; j < s.k; ++j) bound[static_cast<size_t>(i * s.k + j)] = max_want * (1.0 + std::fabs(mean) / (10.0 * std_dev));
    }
    return compare("layernorm", impl, got, want, bound);
}

std::vector<Shape> norm_shapes(bool layer) {
    std::vector<Shape> shapes;
    auto add = [&](int n, int d, float offset, bool in_place, bool misaligned) {
        Shape s{.n = n, .k = d, .param = offset, .in_place = in_place, .misaligned = misaligned};
        s.label = rows_label(s);
        shapes.push_back(s);
    };
    // d off every vector width and around the CUDA kernels' block sizes; rows around 100 for LayerNorm, whose
    // large mean must not cancel the variance away.
    for (int n : {1, 2, 5, 33})
        for (int d : {1, 3, 7, 17, 64, 257, 576, 640, 768, 2048, 4100})
            for (float offset : layer ? std::vector<float>{0.0f, 100.0f} : std::vector<float>{0.0f}) add(n, d, offset, false, false);
    for (int d : {7, 576, 4100}) {
        add(3, d, 0.0f, true, false);
        add(2, d, 0.0f, false, true);
        add(2, d, 0.0f, true, true);
    }
    add(1, 8192, 0.0f, false, false);
    // The q / k norm of Gemma 3 (head_dim 256) and of a 64-wide head: rows x heads rows of head_dim.
    add(5 * 4, 256, 0.0f, true, false);
    add(3 * 9, 64, 0.0f, true, false);
    return shapes;
}

// x [n_rows][heads][head_dim] rotated in place by tables [n_rows][rotary_dim / 2] of random angles; the
// elements past rotary_dim of every head must pass through bit for bit.
Verdict check_rope(const Implementation& impl, const Shape& s, uint32_t seed) {
    const size_t half = static_cast<size_t>(s.rotary_dim / 2);
    const std::vector<float> angles = random_floats(static_cast<size_t>(s.n) * half, seed, -10.0f, 10.0f);
    std::vector<float> cos_values(angles.size()), sin_values(angles.size());  // [n_rows][half]
    for (size_t i = 0; i < angles.size(); ++i) {
        cos_values[i] = std::cos(angles[i]);
        sin_values[i] = std::sin(angles[i]);
    }
    const std::vector<float> x = random_floats(static_cast<size_t>(s.n * s.heads * s.head_dim), seed + 1);
    std::vector<float> want = x;
    reference.rope(want.data(), cos_values.data(), sin_values.data(), s.n, s.heads, s.head_dim, s.rotary_dim);
    Placed<float> got(x, s.misaligned);
    const Placed<float> cos(cos_values, s.misaligned), sin(sin_values, s.misaligned);
    impl.table.rope(got.data(), cos.data(), sin.data(), s.n, s.heads, s.head_dim, s.rotary_dim);
    const std::vector<float> out = got.values();
    std::vector<float> tail, tail_in;  // the elements past rotary_dim
    for (size_t i = 0; i < x.size(); ++i)
        if (static_cast<int>(i % static_cast<size_t>(s.head_dim)) >= s.rotary_dim) {
            tail.push_back(out[i]);
            tail_in.push_back(x[i]);
        }
    return first_failure({compare("rope", impl, out, want), same_bits(tail, tail_in, "elements past rotary_dim")});
}

std::vector<Shape> rope_shapes() {
    std::vector<Shape> shapes;
    auto add = [&](int rows, int heads, int head_dim, int rotary_dim, bool misaligned = false, const std::string& note = "") {
        shapes.push_back({.label = "rows " + std::to_string(rows) + " heads " + std::to_string(heads) + " head_dim " +
                                   std::to_string(head_dim) + " rotary_dim " + std::to_string(rotary_dim) +
                                   (misaligned ? " misaligned" : "") + (note.empty() ? "" : " (" + note + ")"),
                          .n = rows, .heads = heads, .head_dim = head_dim, .rotary_dim = rotary_dim, .misaligned = misaligned});
    };
    for (int rows : {1, 3, 5})
        for (int heads : {1, 3, 8})
            for (int head_dim : {2, 6, 8, 24, 48, 64, 80, 100, 128, 256}) add(rows, heads, head_dim, head_dim);
    // Partial rotary (GPT-NeoX): vectorised where rotary_dim / 2 divides by 4, scalar elsewhere.
    for (int rows : {1, 5})
        for (auto [head_dim, rotary_dim] : {std::pair{16, 8}, {64, 16}, {80, 20}, {128, 64}, {24, 2}, {64, 62}, {100, 24},
                                            {18, 8}, {7, 6}, {6, 4}})
            add(rows, 3, head_dim, rotary_dim);
    add(2, 3, 64, 64, true);
    add(2, 2, 64, 32, true);
    add(5, 9, 64, 64, false, "SmolLM2-135M q");
    add(5, 3, 64, 64, false, "SmolLM2-135M k");
    add(5, 4, 256, 256, false, "Gemma 3 270M q");
    add(5, 1, 256, 256, false, "Gemma 3 270M k");
    return shapes;
}

}  // namespace

std::vector<Op> row_ops() {
    return {
        {"rmsnorm", norm_shapes(false), [](const Implementation& impl, const Shape&) { return impl.table.rmsnorm != nullptr; },
         [](const Implementation& impl, const Shape& s, uint32_t seed) { return check_norm(impl, s, seed, false); }},
        {"layernorm", norm_shapes(true), [](const Implementation& impl, const Shape&) { return impl.table.layernorm != nullptr; },
         [](const Implementation& impl, const Shape& s, uint32_t seed) { return check_norm(impl, s, seed, true); }},
        {"rope", rope_shapes(), [](const Implementation& impl, const Shape&) { return impl.table.rope != nullptr; }, check_rope},
    };
}

}  // namespace kvx::ops
