// The reference kernels: the oracle every optimised backend is tested against.
//
// Written to be obviously correct, not fast: plain loops over the definitions in kernels.h, sums in double
// (also plain loops rather than Eigen, so that a Debug + sanitizer build of the tests stays quick).
// Never optimise this file; a faster kernel belongs in a backend, tested against this one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/baseline_kernels.h"
#include "kernels/f16.h"
#include "kernels/f16_row_groups.h"
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

// reference_matmul_f16 of w [m][k] in row groups (kernels/f16_row_groups.h).
void reference_matmul_f16_groups(float* out, const float* x, const uint16_t* w, int n, int k, int m) {
    for (int i = 0; i < n; ++i) {
        const float* xi = x + static_cast<int64_t>(i) * k;  // row i of x [n][k]
        for (int j = 0; j < m; ++j) {
            double dot = 0.0;
            for (int p = 0; p < k; ++p) dot += static_cast<double>(xi[p]) * f16_to_f32(w[f16_row_groups_index(j, p, k)]);
            out[static_cast<int64_t>(i) * m + j] = static_cast<float>(dot);
        }
    }
}

void reference_matmul_q(float* out, const float* x, const QuantMatrix& w, int n, int k, int m) {
    std::vector<float> wj(static_cast<size_t>(k));  // row j of w, dequantized
    for (int j = 0; j < m; ++j) {
        dequantize_row(w, j, k, wj.data());
        for (int i = 0; i < n; ++i) {
            const float* xi = x + static_cast<int64_t>(i) * k;  // row i of x [n][k]
            double dot = 0.0;
            for (int p = 0; p < k; ++p) dot += static_cast<double>(xi[p]) * wj[static_cast<size_t>(p)];
            out[static_cast<int64_t>(i) * m + j] = static_cast<float>(dot);
        }
    }
}

void reference_matmuls(const MatmulPart* parts, int n_parts, const float* x, int n, int k) {
    for (int p = 0; p < n_parts; ++p) {
        const MatmulPart& part = parts[p];
        if (part.w_f32) {
            reference_matmul(part.out, x, part.w_f32, n, k, part.m);
        } else if (part.w_f16) {
            reference_matmul_f16(part.out, x, part.w_f16, n, k, part.m);
        } else if (part.w_f16_groups) {
            reference_matmul_f16_groups(part.out, x, part.w_f16_groups, n, k, part.m);
        } else {
            reference_matmul_q(part.out, x, *part.w_q, n, k, part.m);
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

void reference_rope(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim,
                    int rotary_dim) {
    const int half = rotary_dim / 2;  // elements rotary_dim .. head_dim pass through
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

// A value as a cache of element type T stores it.
template <class T>
T cache_element(float x) {
    if constexpr (std::is_same_v<T, uint16_t>) {
        return f32_to_f16(x);
    } else {
        return x;
    }
}

template <class T>
void reference_kv_append_of(T* k_cache, T* v_cache, const float* k, const float* v, const int64_t* slots, int n_rows,
                            int n_kv_heads, int head_dim, int block_size) {
    for (int r = 0; r < n_rows; ++r) {
        if (slots[r] < 0) continue;
        const int64_t block = slots[r] / block_size;
        const int64_t offset = slots[r] % block_size;
        for (int h = 0; h < n_kv_heads; ++h) {
            const int64_t src = (static_cast<int64_t>(r) * n_kv_heads + h) * head_dim;
            const int64_t dst = ((block * n_kv_heads + h) * block_size + offset) * head_dim;
            for (int j = 0; j < head_dim; ++j) {
                k_cache[dst + j] = cache_element<T>(k[src + j]);
                v_cache[dst + j] = cache_element<T>(v[src + j]);
            }
        }
    }
}

constexpr auto reference_kv_append = reference_kv_append_of<float>;
constexpr auto reference_kv_append_f16 = reference_kv_append_of<uint16_t>;

double cache_value(float x) { return x; }
double cache_value(uint16_t h) { return f16_to_f32(h); }

// The first position a query at pos sees (kernels.h: window 0 is full causal attention).
int first_visible(int pos, int window) { return window > 0 ? std::max(0, pos - window + 1) : 0; }

// out[0 .. head_dim) = softmax-weighted sum of the values at positions first .. last for query q. Two
// passes: the scores of every visible key (to find their maximum, which keeps exp in range), then the
// weighted values. row_offset(p) is the element offset of position p's key row in k, and of its value row
// in v. The per-call vectors are fine here: this is the oracle, not the hot path.
template <class T, class RowOffset>
void reference_attend(const float* q, const T* k, const T* v, int first, int last, int head_dim, float scale,
                      float softcap, RowOffset row_offset, float* out) {
    std::vector<double> scores;    // [last - first + 1], one per visible key
    std::vector<double> weighted;  // [head_dim]
    double max_score = -std::numeric_limits<double>::infinity();
    for (int p = first; p <= last; ++p) {
        const T* key = k + row_offset(p);
        double dot = 0.0;
        for (int j = 0; j < head_dim; ++j) dot += static_cast<double>(q[j]) * cache_value(key[j]);
        const double score = dot * scale;
        scores.push_back(softcap > 0 ? softcap * std::tanh(score / softcap) : score);
        max_score = std::max(max_score, scores.back());
    }
    weighted.assign(head_dim, 0.0);
    double sum = 0.0;
    for (int p = first; p <= last; ++p) {
        const double weight = std::exp(scores[static_cast<size_t>(p - first)] - max_score);
        const T* value = v + row_offset(p);
        sum += weight;
        for (int j = 0; j < head_dim; ++j) weighted[j] += weight * cache_value(value[j]);
    }
    for (int j = 0; j < head_dim; ++j) out[j] = static_cast<float>(weighted[j] / sum);
}

template <class T>
void reference_paged_attention_of(const PagedAttentionArgs& a) {
    const int group = a.n_heads / a.n_kv_heads;
    const T* k_cache = static_cast<const T*>(a.k_cache);
    const T* v_cache = static_cast<const T*>(a.v_cache);
    for (int r = 0; r < a.n_rows; ++r) {
        const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[r]) * a.table_stride;
        for (int h = 0; h < a.n_heads; ++h) {
            const int kv_head = h / group;
            const int64_t row_head = static_cast<int64_t>(r) * a.n_heads + h;
            auto row_offset = [&](int p) {  // table entries before the window are never looked at
                const int64_t block = table[p / a.block_size];
                return ((block * a.n_kv_heads + kv_head) * a.block_size + p % a.block_size) * a.head_dim;
            };
            reference_attend(a.q + row_head * a.head_dim, k_cache, v_cache, first_visible(a.row_pos[r], a.window),
                             a.row_pos[r], a.head_dim, a.scale, a.softcap, row_offset, a.out + row_head * a.head_dim);
        }
    }
}

void reference_paged_attention(const PagedAttentionArgs& a) {
    if (a.kv_dtype == KvDtype::f16) {
        reference_paged_attention_of<uint16_t>(a);
    } else {
        reference_paged_attention_of<float>(a);
    }
}

void reference_contiguous_attention(const ContiguousAttentionArgs& a) {
    const int group = a.n_heads / a.n_kv_heads;
    for (int r = 0; r < a.n_rows; ++r) {
        for (int h = 0; h < a.n_heads; ++h) {
            const int64_t region = static_cast<int64_t>(a.row_seq[r]) * a.n_kv_heads + h / group;
            const int64_t row_head = static_cast<int64_t>(r) * a.n_heads + h;
            auto row_offset = [&](int p) { return (region * a.max_seq + p) * a.head_dim; };
            reference_attend(a.q + row_head * a.head_dim, a.k_cache, a.v_cache, first_visible(a.row_pos[r], a.window),
                             a.row_pos[r], a.head_dim, a.scale, 0.0f, row_offset, a.out + row_head * a.head_dim);
        }
    }
}

void reference_copy_blocks(void* k_cache, void* v_cache, const BlockCopy* pairs, int n_pairs, int64_t block_elems,
                           int elem_bytes) {
    const int64_t block_bytes = block_elems * elem_bytes;
    for (void* cache : {k_cache, v_cache}) {
        unsigned char* bytes = static_cast<unsigned char*>(cache);
        for (int i = 0; i < n_pairs; ++i)
            for (int64_t b = 0; b < block_bytes; ++b)
                bytes[pairs[i].dst * block_bytes + b] = bytes[pairs[i].src * block_bytes + b];
    }
}

void reference_reorder_beams(void* new_k, void* new_v, const void* old_k, const void* old_v, const int32_t* beam_indices,
                             int n_beams, int64_t beam_elems, int elem_bytes) {
    const int64_t beam_bytes = beam_elems * elem_bytes;
    const std::pair<void*, const void*> caches[] = {{new_k, old_k}, {new_v, old_v}};
    for (const auto& [to, from] : caches) {
        unsigned char* dst = static_cast<unsigned char*>(to);
        const unsigned char* src = static_cast<const unsigned char*>(from);
        for (int i = 0; i < n_beams; ++i)
            for (int64_t b = 0; b < beam_bytes; ++b) dst[i * beam_bytes + b] = src[beam_indices[i] * beam_bytes + b];
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

void reference_geglu_tanh(float* out, const float* gate, const float* up, int64_t n) {
    const double sqrt_2_over_pi = std::sqrt(2.0 / std::acos(-1.0));
    for (int64_t i = 0; i < n; ++i) {
        const double g = gate[i];
        const double u = sqrt_2_over_pi * (g + 0.044715 * g * g * g);
        out[i] = static_cast<float>(g / (1.0 + std::exp(-2.0 * u)) * up[i]);
    }
}

void reference_gelu_erf(float* out, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        out[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
    }
}

void reference_softcap(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

void reference_clamp(float* x, int64_t n, float c) {
    for (int64_t i = 0; i < n; ++i) {
        if (x[i] < -c) x[i] = -c;
        if (x[i] > c) x[i] = c;  // a NaN fails both tests and stays
    }
}

void reference_scale(float* x, int64_t n, float s) {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
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
    .matmul_q = reference_matmul_q,
    .matmul_q_layout = QuantLayout::rows,
    .matmul_f16_row_groups = false,
    .matmuls = reference_matmuls,
    .rmsnorm = reference_rmsnorm,
    .layernorm = reference_layernorm,
    .rope = reference_rope,
    .kv_append = reference_kv_append,
    .kv_append_f16 = reference_kv_append_f16,
    .paged_attention = reference_paged_attention,
    .copy_blocks = reference_copy_blocks,
    .swiglu = reference_swiglu,
    .gelu_tanh = reference_gelu_tanh,
    .geglu_tanh = reference_geglu_tanh,
    .gelu_erf = reference_gelu_erf,
    .softcap = reference_softcap,
    .clamp = reference_clamp,
    .scale = reference_scale,
    .add = reference_add,
    .add_bias = reference_add_bias,
};

constexpr BaselineKernelTable kReferenceBaselineKernels{
    .name = "reference",
    .contiguous_attention = reference_contiguous_attention,
    .reorder_beams = reference_reorder_beams,
};

}  // namespace

const KernelTable& reference_kernels() { return kReferenceKernels; }
const BaselineKernelTable& reference_baseline_kernels() { return kReferenceBaselineKernels; }

}  // namespace kvx
