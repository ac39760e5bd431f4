// The harness's one table of tolerances, and the comparisons that apply them.
//
// Each bound is what the kernel's arithmetic allows against an oracle in double, with room for the worst
// shape in the table, and tight enough that a wrong index, block boundary, rounding or tail fails by far
// more (the planted bugs of tests/kernel_ops/README.md). device_value differs only where the GPU's libm
// (expf, tanhf, erfcf: 2 to 4 ulp) replaces the CPU levels' polynomials whose error was measured.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/error.h"
#include "tests/kernel_ops/op_harness.h"

namespace kvx::ops {
namespace {

const Tolerance kTolerances[] = {
    // fp32 sums of k products (k up to 2049): a few ulps per term at most, far below 1e-5 of the largest
    // output; fp16 weights widen to fp32 exactly, so the same bound (cpu_kernels_test, gemv_test).
    {"matmul", Measure::max_scaled, 1e-5, 1e-5},
    {"matmul_f16", Measure::max_scaled, 1e-5, 1e-5},
    {"matmuls", Measure::max_scaled, 1e-5, 1e-5},
    // Against the bound of kernels.h for the SIMD levels: sum_j |w_j| amax_x(j) / 254 (+ |w_j| amax 2^-11 for
    // ggml's fp16 scale) plus fp32 summation, 1e-6 (|x.w| + 1e-3)(4 + k / 32); for an exact-x implementation
    // the fp32 part only. The op checks a second, tight oracle too: x rounded as documented, fp32 bound only.
    {"matmul_q", Measure::bounded, 1.0, 1.0},
    // A mean of squares and one rsqrt per row: a few ulps of the output (cpu_kernels_test's 1e-5).
    {"rmsnorm", Measure::max_scaled, 1e-5, 1e-5},
    // As rmsnorm where the rows sit near 0; x - mean loses bits as |mean| / std grows, so the op's bound is
    // 1 + |mean| / (10 std) times max(1, max |want|): 1e-5 at mean 0, about 7e-5 for rows around 100.
    {"layernorm", Measure::bounded, 1e-5, 1e-5},
    // Two products and a sum per element, cos and sin given: an ulp or two.
    {"rope", Measure::max_scaled, 1e-5, 1e-5},
    // Copies, and fp16 rounding that must be f32_to_f16's to the bit (ties, subnormals, inf, NaN).
    {"kv_append", Measure::bits, 0, 0},
    {"kv_append_f16", Measure::bits, 0, 0},
    {"copy_blocks", Measure::bits, 0, 0},
    // Scores, a running softmax and the weighted sum in fp32: 1e-5 of outputs that are at most about 1.
    // An fp16 cache is the same values on both sides (the reference widens them exactly).
    {"paged_attention", Measure::max_scaled, 1e-5, 1e-5},
    // The polynomial exp gives about 2.5e-7 relative; 5e-7 also catches a degraded exp (cpu_kernels_test).
    // expf's 2 ulp, a division and two products: about 5 ulp on a GPU, 2e-6 leaves room.
    {"swiglu", Measure::relative, 5e-7, 2e-6},
    // Relative to 1e-6 times gelu's condition, 2 + 2 |u| (u = sqrt(2 / pi) (x + 0.044715 x^3)): e^(-2u)
    // amplifies the fp32 rounding of u in the far negative tail. expf's extra ulps: 4e-6 on a GPU.
    {"gelu_tanh", Measure::bounded, 1e-6, 4e-6},
    // tanh or erf and a product or two: 2e-6 of the largest output (cpu_kernels_test).
    {"geglu_tanh", Measure::max_scaled, 2e-6, 2e-6},
    {"gelu_erf", Measure::max_scaled, 2e-6, 2e-6},
    {"softcap", Measure::max_scaled, 2e-6, 2e-6},
    // Each output an input or a bound; one fp32 product; one fp32 add: nothing but the same bits is right.
    {"clamp", Measure::bits, 0, 0},
    {"scale", Measure::bits, 0, 0},
    {"add", Measure::bits, 0, 0},
    {"add_bias", Measure::bits, 0, 0},
};

bool same_float(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
}

}  // namespace

const Tolerance& tolerance_of(const std::string& op) {
    for (const Tolerance& t : kTolerances)
        if (op == t.op) return t;
    throw Error("no tolerance for op " + op + " in tests/kernel_ops/tolerances.cpp");
}

Verdict compare(const std::string& op, const Implementation& impl, const std::vector<float>& got,
                const std::vector<float>& want, const std::vector<double>& bound) {
    const Tolerance& t = tolerance_of(op);
    if (got.size() != want.size()) return {false, "size " + std::to_string(got.size()) + ", want " + std::to_string(want.size())};
    if (t.measure == Measure::bits) return same_bits(got, want, "output");
    const double value = impl.device_math ? t.device_value : t.value;
    double max_want = 0.0;
    for (float w : want) max_want = std::max(max_want, std::fabs(double{w}));
    double worst_ratio = 0.0, worst_error = 0.0, worst_bound = 0.0;
    size_t worst = 0, non_finite = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) {
            // A non-finite output passes only where the oracle's is the same (an input's NaN or inf kept).
            if (!same_float(got[i], want[i]) && non_finite++ == 0) worst = i;
            continue;
        }
        const double error = std::fabs(double{got[i]} - double{want[i]});
        double limit = 0.0;
        switch (t.measure) {
            case Measure::max_scaled: limit = value * std::max(1.0, max_want); break;
            case Measure::relative: limit = value * std::fabs(double{want[i]}) + 1e-30; break;
            case Measure::bounded: limit = value * bound.at(i); break;
            case Measure::bits: break;
        }
        const double ratio = error / limit;
        if (!(ratio <= worst_ratio)) {  // NaN error (want not finite) counts as the worst
            worst_ratio = ratio;
            worst_error = error;
            worst_bound = limit;
            if (non_finite == 0) worst = i;
        }
    }
    std::ostringstream detail;
    if (non_finite > 0) {
        detail << non_finite << " non-finite outputs, the first at " << worst << " (" << got[worst] << ", want "
               << want[worst] << ")";
        return {false, detail.str()};
    }
    if (worst_ratio <= 1.0) return {};
    detail << "max error " << worst_error << " at " << worst << " (got " << got[worst] << ", want " << want[worst]
           << ", bound " << worst_bound << ")";
    return {false, detail.str()};
}

template <class T>
Verdict same_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
    if (got.size() != want.size()) return {false, std::string(what) + ": size differs"};
    size_t differences = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        bool same = std::memcmp(&got[i], &want[i], sizeof(T)) == 0;
        if constexpr (std::is_same_v<T, float>) same = same || same_float(got[i], want[i]);
        if (!same && differences++ == 0) first = i;
    }
    if (differences == 0) return {};
    std::ostringstream detail;
    detail << what << ": " << differences << " of " << got.size() << " elements differ in their bits, the first at "
           << first << " (got " << +got[first] << ", want " << +want[first] << ")";
    return {false, detail.str()};
}

template Verdict same_bits(const std::vector<float>&, const std::vector<float>&, const char*);
template Verdict same_bits(const std::vector<uint16_t>&, const std::vector<uint16_t>&, const char*);
template Verdict same_bits(const std::vector<uint8_t>&, const std::vector<uint8_t>&, const char*);

Verdict first_failure(std::initializer_list<Verdict> verdicts) {
    for (const Verdict& v : verdicts)
        if (!v.pass) return v;
    return {};
}

}  // namespace kvx::ops
