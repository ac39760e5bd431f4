// The reference kernels: the oracle every optimised backend is tested against.
//
// Written to be obviously correct, not fast: plain loops over the definitions in kernels.h, sums in double
// (also plain loops rather than Eigen, so that a Debug + sanitizer build of the tests stays quick).
// Never optimise this file; a faster kernel belongs in a backend, tested against this one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/f16.h"
#include "kernels/kernels.h"

namespace kvx {
namespace {

void reference_matmul(float* out, const float* x, const float* w, int n, int k, int m) {
    for (int i = 0; i < n; ++i) {
        const float* xi = x + static_cast<int64_t>(i) * k;  // row i of x [n][k]
        for (int j = 0; j < m; ++j) {
            const float* wj = w + static_cast<int64_t>(j) * k;  // row j of w [m][k]
            double dot = 0.0;
            for (int p = 0; p < k; ++p) dot += static_cast<double>(xi[p]) * wj[p];
            out[static_cast<int64_t>(i) * m + j] = static_cast<float>(dot);
        }
    }
}

void reference_matmul_f16(float* out, const float* x, const uint16_t* w, int n, int k, int m) {
    for (int i = 0; i < n; ++i) {
        const float* xi = x + static_cast<int64_t>(i) * k;  // row i of x [n][k]
        for (int j = 0; j < m; ++j) {
            const uint16_t* wj = w + static_cast<int64_t>(j) * k;  // row j of w [m][k], fp16 bits
            double dot = 0.0;
            for (int p = 0; p < k; ++p) dot += static_cast<double>(xi[p]) * f16_to_f32(wj[p]);
            out[static_cast<int64_t>(i) * m + j] = static_cast<float>(dot);
        }
    }
}

void reference_rmsnorm(float* out, const float* x, const float* weight, int n, int d, float eps) {
    for (int i = 0; i < n; ++i) {
        const float* xi = x + static_cast<int64_t>(i) * d;
        float* oi = out + static_cast<int64_t>(i) * d;
        double sum_of_squares = 0.0;
        for (int j = 0; j < d; ++j) sum_of_squares += static_cast<double>(xi[j]) * xi[j];
        // The whole row is read before any of it is written, so out may alias x.
        const double inv_rms = 1.0 / std::sqrt(sum_of_squares / d + eps);
        for (int j = 0; j < d; ++j) oi[j] = static_cast<float>(xi[j] * inv_rms * weight[j]);
    }
}

void reference_layernorm(float* out, const float* x, const float* weight, const float* bias, int n, int d,
                         float eps) {
    for (int i = 0; i < n; ++i) {
        const float* xi = x + static_cast<int64_t>(i) * d;
        float* oi = out + static_cast<int64_t>(i) * d;
        double sum = 0.0;
        for (int j = 0; j < d; ++j) sum += xi[j];
        const double mean = sum / d;
        double sum_of_squares = 0.0;
        for (int j = 0; j < d; ++j) sum_of_squares += (xi[j] - mean) * (xi[j] - mean);
        const double inv_std = 1.0 / std::sqrt(sum_of_squares / d + eps);
        for (int j = 0; j < d; ++j) oi[j] = static_cast<float>((xi[j] - mean) * inv_std * weight[j] + bias[j]);
    }
}

void reference_rope(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim) {
    const int half = head_dim / 2;
    for (int r = 0; r < n_rows; ++r) {
        const float* c = cos + static_cast<int64_t>(r) * half;
        const float* s = sin + static_cast<int64_t>(r) * half;
        for (int h = 0; h < n_heads; ++h) {
            float* head = x + (static_cast<int64_t>(r) * n_heads + h) * head_dim;
            for (int j = 0; j < half; ++j) {
                const double x1 = head[j];
                const double x2 = head[j + half];
                head[j] = static_cast<float>(x1 * c[j] - x2 * s[j]);
                head[j + half] = static_cast<float>(x2 * c[j] + x1 * s[j]);
            }
        }
    }
}

void reference_kv_append(float* k_cache, float* v_cache, const float* k, const float* v, const int64_t* slots,
                         int n_rows, int n_kv_heads, int head_dim, int block_size) {
    for (int r = 0; r < n_rows; ++r) {
        if (slots[r] < 0) continue;
        const int64_t block = slots[r] / block_size;
        const int64_t offset = slots[r] % block_size;
        for (int h = 0; h < n_kv_heads; ++h) {
            const int64_t src = (static_cast<int64_t>(r) * n_kv_heads + h) * head_dim;
            const int64_t dst = ((block * n_kv_heads + h) * block_size + offset) * head_dim;
            for (int j = 0; j < head_dim; ++j) {
                k_cache[dst + j] = k[src + j];
                v_cache[dst + j] = v[src + j];
            }
        }
    }
}

// Two passes per (row, head): the scores of every visible key (to find their maximum, which keeps exp in
// range), then the softmax-weighted sum of the values. The per-call vectors are fine here: this is the
// oracle, not the hot path.
void reference_paged_attention(const PagedAttentionArgs& a) {
    const int group = a.n_heads / a.n_kv_heads;
    std::vector<double> scores;      // [row_pos + 1], one per visible key
    std::vector<double> weighted;    // [head_dim]
    for (int r = 0; r < a.n_rows; ++r) {
        const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[r]) * a.table_stride;
        const int n_keys = a.row_pos[r] + 1;
        for (int h = 0; h < a.n_heads; ++h) {
            const int kv_head = h / group;
            const float* q = a.q + (static_cast<int64_t>(r) * a.n_heads + h) * a.head_dim;
            auto key_offset = [&](int p) {  // element offset of position p's row in k_cache / v_cache
                const int64_t block = table[p / a.block_size];
                return ((block * a.n_kv_heads + kv_head) * a.block_size + p % a.block_size) * a.head_dim;
            };

            scores.assign(n_keys, 0.0);
            double max_score = -std::numeric_limits<double>::infinity();
            for (int p = 0; p < n_keys; ++p) {
                const float* key = a.k_cache + key_offset(p);
                double dot = 0.0;
                for (int j = 0; j < a.head_dim; ++j) dot += static_cast<double>(q[j]) * key[j];
                scores[p] = dot * a.scale;
                max_score = std::max(max_score, scores[p]);
            }

            weighted.assign(a.head_dim, 0.0);
            double sum = 0.0;
            for (int p = 0; p < n_keys; ++p) {
                const double weight = std::exp(scores[p] - max_score);
                const float* value = a.v_cache + key_offset(p);
                sum += weight;
                for (int j = 0; j < a.head_dim; ++j) weighted[j] += weight * value[j];
            }
            float* out = a.out + (static_cast<int64_t>(r) * a.n_heads + h) * a.head_dim;
            for (int j = 0; j < a.head_dim; ++j) out[j] = static_cast<float>(weighted[j] / sum);
        }
    }
}

void reference_swiglu(float* out, const float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double g = gate[i];
        out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
    }
}

// 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)), the same function: 1 + tanh(u) would cancel to 0 for
// u below about -19 even in double, losing the tiny negative outputs.
void reference_gelu_tanh(float* out, const float* x, int64_t n) {
    const double sqrt_2_over_pi = std::sqrt(2.0 / std::acos(-1.0));
    for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        const double u = sqrt_2_over_pi * (v + 0.044715 * v * v * v);
        out[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * u)));
    }
}

void reference_add(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void reference_add_bias(float* x, const float* bias, int n, int d) {
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < d; ++j) x[static_cast<int64_t>(i) * d + j] += bias[j];
}

constexpr KernelTable kReferenceKernels{
    .name = "reference",
    .matmul = reference_matmul,
    .matmul_f16 = reference_matmul_f16,
    .rmsnorm = reference_rmsnorm,
    .layernorm = reference_layernorm,
    .rope = reference_rope,
    .kv_append = reference_kv_append,
    .paged_attention = reference_paged_attention,
    .swiglu = reference_swiglu,
    .gelu_tanh = reference_gelu_tanh,
    .add = reference_add,
    .add_bias = reference_add_bias,
};

}  // namespace

const KernelTable& reference_kernels() { return kReferenceKernels; }

}  // namespace kvx
