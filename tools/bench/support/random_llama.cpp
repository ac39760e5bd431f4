#include "tools/bench/support/random_llama.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "kernels/error.h"
#include "kernels/f16.h"

namespace kvx::bench {
namespace {

constexpr float kWeightStd = 0.02f;
constexpr double kRopeBase = 500000.0;
constexpr size_t kFillChunk = size_t{1} << 20;  // elements per independently seeded generator

// N(0, kWeightStd) values, converted by `store`, filled in parallel: each chunk has its own generator seeded
// from (seed, chunk), so the values do not depend on the thread count and a billion of them take seconds.
template <class T, class Store>
void fill_normal(std::span<T> out, uint64_t seed, Store store) {
    const int64_t chunks = static_cast<int64_t>((out.size() + kFillChunk - 1) / kFillChunk);
#pragma omp parallel for schedule(dynamic)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        std::mt19937_64 generator(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(chunk));
        std::normal_distribution<float> normal(0.0f, kWeightStd);
        const size_t begin = static_cast<size_t>(chunk) * kFillChunk;
        const size_t end = std::min(out.size(), begin + kFillChunk);
        for (size_t i = begin; i < end; ++i) out[i] = store(normal(generator));
    }
}

void check_shape(const LlamaShape& s) {
    for (const auto& [name, value] : {std::pair{"dim", s.dim}, {"hidden_dim", s.hidden_dim}, {"n_layers", s.n_layers},
                                      {"n_heads", s.n_heads}, {"n_kv_heads", s.n_kv_heads}, {"head_dim", s.head_dim},
                                      {"vocab_size", s.vocab_size}})
        if (value <= 0) throw Error(std::string("the random model's ") + name + " must be positive, not " + std::to_string(value));
    if (s.n_heads % s.n_kv_heads != 0)
        throw Error("the random model's n_heads (" + std::to_string(s.n_heads) + ") must be a multiple of n_kv_heads (" +
                    std::to_string(s.n_kv_heads) + ")");
    if (s.head_dim % 2 != 0) throw Error("the random model's head_dim must be even for rotary positions, not " + std::to_string(s.head_dim));
}

}  // namespace

int64_t LlamaShape::matrix_elements() const {
    const int64_t q = int64_t{n_heads} * head_dim, kv = int64_t{n_kv_heads} * head_dim;
    const int64_t per_layer = 2 * q * dim + 2 * kv * dim + 3 * int64_t{hidden_dim} * dim;
    return n_layers * per_layer + int64_t{vocab_size} * dim;
}

RandomLlama::RandomLlama(const LlamaShape& shape, int max_seq_len, uint64_t seed) {
    check_shape(shape);
    ModelConfig& c = model_.config;
    c.traits = *find_architecture("llama");
    c.dim = shape.dim;
    c.hidden_dim = shape.hidden_dim;
    c.n_layers = shape.n_layers;
    c.n_heads = shape.n_heads;
    c.n_kv_heads = shape.n_kv_heads;
    c.head_dim = shape.head_dim;
    c.vocab_size = shape.vocab_size;
    c.max_seq_len = max_seq_len;
    c.tied_embeddings = true;
    c.weights_dtype = shape.weights_dtype;
    model_.dir = "(random weights in memory)";

    const size_t elements = static_cast<size_t>(shape.matrix_elements());
    const bool f16 = shape.weights_dtype == WeightDtype::f16;
    if (f16) {
        matrices_f16_.resize(elements);
        fill_normal(std::span<uint16_t>(matrices_f16_), seed, [](float x) { return f32_to_f16(x); });
    } else {
        matrices_f32_.resize(elements);
        fill_normal(std::span<float>(matrices_f32_), seed, [](float x) { return x; });
    }
    size_t used = 0;  // elements of the matrix buffer handed out so far
    auto matrix = [&](int64_t rows, int64_t cols) {
        WeightMatrix m;
        m.dtype = shape.weights_dtype;
        m.rows = rows;
        m.cols = cols;
        m.data = f16 ? static_cast<const void*>(matrices_f16_.data() + used) : matrices_f32_.data() + used;
        used += static_cast<size_t>(rows * cols);
        return m;
    };

    norm_weight_.assign(static_cast<size_t>(shape.dim), 1.0f);
    const Norm norm{norm_weight_.data(), nullptr};
    for (int i = 0; i < shape.head_dim / 2; ++i)
        rope_inv_freq_.push_back(static_cast<float>(std::pow(kRopeBase, -2.0 * i / shape.head_dim)));
    model_.rope_inv_freq = rope_inv_freq_.data();

    const int64_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), hidden = c.hidden_dim;
    model_.tok_embeddings = matrix(c.vocab_size, dim);
    for (int i = 0; i < c.n_layers; ++i) {
        LayerWeights layer;
        layer.attn_norm = norm;
        layer.wq.weight = matrix(q, dim);
        layer.wk.weight = matrix(kv, dim);
        layer.wv.weight = matrix(kv, dim);
        layer.wo.weight = matrix(dim, q);
        layer.ffn_norm = norm;
        layer.w_gate.weight = matrix(hidden, dim);
        layer.w_up.weight = matrix(hidden, dim);
        layer.w_down.weight = matrix(dim, hidden);
        model_.layers.push_back(layer);
    }
    model_.final_norm = norm;
    model_.classifier = model_.tok_embeddings;
}

}  // namespace kvx::bench
