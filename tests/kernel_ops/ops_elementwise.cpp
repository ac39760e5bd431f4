// The elementwise ops of the table: swiglu, gelu_tanh, geglu_tanh, gelu_erf, softcap, clamp, scale, add and
// add_bias. Lengths around every vector width and past the CPU's parallel threshold; outputs aliasing an
// input; buffers off alignment; the ends of exp's and tanh's ranges; NaN and infinities where the op keeps them.
#include <cmath>
#include <limits>
#include <string>

#include "tests/kernel_ops/op_inputs.h"
#include "tests/kernel_ops/op_table.h"

namespace kvx::ops {
namespace {

const KernelTable& reference = reference_kernels();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The ops' inputs: values in [lo, hi) with `extremes` spread over them (every 7th element).
std::vector<float> inputs(const Shape& s, uint32_t seed, float lo, float hi, std::initializer_list<float> extremes = {}) {
    std::vector<float> v = random_floats(static_cast<size_t>(s.length), seed, lo, hi);
    size_t i = 0;
    for (float e : extremes) {
        if (v.empty()) break;
        v[i * 7 % v.size()] = e;
        ++i;
    }
    return v;
}

// out = f(a, b) (b unused for one-input ops), out poisoned, or aliasing a (in place) .
using Binary = void (*)(const KernelTable&, float* out, const float* a, const float* b, int64_t n);

std::vector<float> run_binary(const KernelTable& table, Binary op, const Shape& s, const std::vector<float>& a,
                              const std::vector<float>& b) {
    Placed<float> pa(a, s.misaligned), out(nan_filled(a.size()), s.misaligned);
    const Placed<float> pb(b, s.misaligned);
    op(table, s.in_place ? pa.data() : out.data(), pa.data(), pb.data(), s.length);
    return s.in_place ? pa.values() : out.values();
}

template <Binary op>
Verdict check_activation(const Implementation& impl, const Shape& s, const char* name, const std::vector<float>& a,
                         const std::vector<float>& b) {
    const std::vector<float> want = run_binary(reference, op, {.length = s.length}, a, b);
    const std::vector<float> got = run_binary(impl.table, op, s, a, b);
    if (std::string(name) != "gelu_tanh") return compare(name, impl, got, want);
    // 1e-6 of gelu's condition, 2 + 2 |u| (tolerances.cpp), times |want|.
    std::vector<double> bound(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        const double v = a[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        bound[i] = (2.0 + 2.0 * std::fabs(u)) * std::fabs(double{want[i]}) + 1e-30 / 1e-6;
    }
    return compare(name, impl, got, want, bound);
}

void swiglu(const KernelTable& t, float* out, const float* a, const float* b, int64_t n) { t.swiglu(out, a, b, n); }
void geglu(const KernelTable& t, float* out, const float* a, const float* b, int64_t n) { t.geglu_tanh(out, a, b, n); }
void gelu_tanh(const KernelTable& t, float* out, const float* a, const float*, int64_t n) { t.gelu_tanh(out, a, n); }
void gelu_erf(const KernelTable& t, float* out, const float* a, const float*, int64_t n) { t.gelu_erf(out, a, n); }

// x in place: op(x, n, param) on the reference and impl; x holds NaN and infinities where with_specials.
using InPlace = void (*)(float* x, int64_t n, float param);

Verdict check_in_place(const Implementation& impl, const Shape& s, uint32_t seed, const char* name, InPlace on_ref,
                       InPlace on_impl, float lo, float hi, bool with_specials) {
    std::vector<float> x = random_floats(static_cast<size_t>(s.length), seed, lo, hi);
    for (size_t i = 0; with_specials && i < x.size(); i += 7) x[i] = i % 3 == 0 ? kNan : i % 3 == 1 ? kInf : -kInf;
    std::vector<float> want = x;
    on_ref(want.data(), s.length, s.param);
    Placed<float> got(x, s.misaligned);
    on_impl(got.data(), s.length, s.param);
    return compare(name, impl, got.values(), want);
}

Verdict check_add(const Implementation& impl, const Shape& s, uint32_t seed) {
    const std::vector<float> x = random_floats(static_cast<size_t>(s.length), seed), y = random_floats(x.size(), seed + 1);
    std::vector<float> want = x;
    reference.add(want.data(), y.data(), s.length);
    Placed<float> got(x, s.misaligned);
    const Placed<float> py(y, s.misaligned);
    impl.table.add(got.data(), py.data(), s.length);
    return compare("add", impl, got.values(), want);
}

Verdict check_add_bias(const Implementation& impl, const Shape& s, uint32_t seed) {
    const std::vector<float> x = random_floats(static_cast<size_t>(s.n) * static_cast<size_t>(s.k), seed);  // [n][d]
    const std::vector<float> bias = random_floats(static_cast<size_t>(s.k), seed + 1);                      // [d]
    std::vector<float> want = x;
    reference.add_bias(want.data(), bias.data(), s.n, s.k);
    Placed<float> got(x, s.misaligned);
    const Placed<float> pbias(bias, s.misaligned);
    impl.table.add_bias(got.data(), pbias.data(), s.n, s.k);
    return compare("add_bias", impl, got.values(), want);
}

// Lengths around the vector widths (4, 8, 16), long enough for grid-stride rounds, and 2^18: past the CPU's
// kMinParallelElements. in_place and misaligned variants at a few of them.
std::vector<Shape> length_shapes(std::initializer_list<float> params, bool with_in_place, const std::string& param_name = "") {
    std::vector<Shape> shapes;
    auto add = [&](int64_t n, float param, bool in_place, bool misaligned) {
        shapes.push_back({.label = "n " + std::to_string(n) + (param_name.empty() ? "" : " " + param_name + " " + std::to_string(param)) +
                                   (in_place ? " in place" : "") + (misaligned ? " misaligned" : ""),
                          .length = n, .param = param, .in_place = in_place, .misaligned = misaligned});
    };
    for (float param : params) {
        for (int64_t n : {1, 3, 4, 5, 7, 16, 17, 64, 172, 1000, 1003, 5003, 1 << 18}) add(n, param, false, false);
        for (int64_t n : {7, 1000, 5003}) {
            add(n, param, false, true);
            if (with_in_place) {
                add(n, param, true, false);
                add(n, param, true, true);
            }
        }
    }
    return shapes;
}

std::vector<Shape> add_bias_shapes() {
    std::vector<Shape> shapes;
    for (int n : {1, 2, 3, 7, 64})
        for (int d : {1, 5, 8, 16, 17, 576, 640, 1003, 2305})
            for (bool misaligned : {false, true})
                shapes.push_back({.label = "n " + std::to_string(n) + " d " + std::to_string(d) + (misaligned ? " misaligned" : ""),
                                  .n = n, .k = d, .misaligned = misaligned});
    return shapes;
}

bool always(const Implementation&, const Shape&) { return true; }

}  // namespace

std::vector<Op> elementwise_ops() {
    return {
        {"swiglu", length_shapes({0.0f}, true), always,
         [](const Implementation& impl, const Shape& s, uint32_t seed) {
             // Gates at the ends of exp's range: overflow of e^-g, subnormal and flushed results.
             return check_activation<swiglu>(impl, s, "swiglu",
                                             inputs(s, seed, -30.0f, 30.0f, {0.0f, -0.0f, 1e-8f, -1e-8f, 87.0f, -87.0f, 88.5f, -88.5f, 100.0f, -100.0f, -110.0f}),
                                             inputs(s, seed + 1, -2.0f, 2.0f));
         }},
        {"gelu_tanh", length_shapes({0.0f}, true), always,
         [](const Implementation& impl, const Shape& s, uint32_t seed) {
             return check_activation<gelu_tanh>(impl, s, "gelu_tanh",
                                                inputs(s, seed, -12.0f, 12.0f, {0.0f, -0.0f, 1e-8f, -1e-8f, 5.0f, -5.0f, 30.0f, -30.0f, 1e4f, -1e4f, -9.0f, -7.5f, -4.0f}),
                                                {});
         }},
        {"geglu_tanh", length_shapes({0.0f}, true), always,
         [](const Implementation& impl, const Shape& s, uint32_t seed) {
             return check_activation<geglu>(impl, s, "geglu_tanh", inputs(s, seed, -8.0f, 8.0f), inputs(s, seed + 1, -2.0f, 2.0f));
         }},
        {"gelu_erf", length_shapes({0.0f}, true), always,
         [](const Implementation& impl, const Shape& s, uint32_t seed) {
             // The tail below -4, where 1 + erf(x / sqrt 2) cancels: the outputs are small and negative.
             return check_activation<gelu_erf>(impl, s, "gelu_erf", inputs(s, seed, -10.0f, 10.0f, {-7.0f, -6.0f, -5.0f, -4.5f, -3.0f}), {});
         }},
        {"softcap", length_shapes({0.5f, 3.0f, 50.0f}, false, "cap"), always,
         [](const Implementation& impl, const Shape& s, uint32_t seed) {
             return check_in_place(impl, s, seed, "softcap", reference.softcap, impl.table.softcap, -100.0f, 100.0f, false);
         }},
        {"clamp", length_shapes({0.5f, 8.0f, 1e30f}, false, "c"), always,
         [](const Implementation& impl, const Shape& s, uint32_t seed) {
             return check_in_place(impl, s, seed, "clamp", reference.clamp, impl.table.clamp, -20.0f, 20.0f, true);
         }},
        {"scale", length_shapes({0.125f, 0.22f, 12.0f}, false, "s"), always,
         [](const Implementation& impl, const Shape& s, uint32_t seed) {
             return check_in_place(impl, s, seed, "scale", reference.scale, impl.table.scale, -20.0f, 20.0f, true);
         }},
        {"add", length_shapes({0.0f}, false), always, check_add},
        {"add_bias", add_bias_shapes(), always, check_add_bias},
    };
}

}  // namespace kvx::ops
