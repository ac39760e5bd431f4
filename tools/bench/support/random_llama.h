// A Llama with random weights, built in memory without files: what a decode-speed measurement needs when
// the numbers the model computes do not matter, only the shapes and bytes it moves. Its kvx::Model points
// into buffers this object owns (Model::weights, the file mapping, stays null: nothing but load_model uses
// it), so the object must outlive every backend made from model().
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model.h"

namespace kvx::bench {

struct LlamaShape {
    int dim = 2048;
    int hidden_dim = 8192;
    int n_layers = 16;
    int n_heads = 32;
    int n_kv_heads = 8;
    int head_dim = 64;
    int vocab_size = 32000;
    WeightDtype weights_dtype = WeightDtype::f16;

    // Weight matrix elements: every layer's seven linear layers and the embedding table (tied to the
    // classifier, as Llama 3.2 1B's).
    int64_t matrix_elements() const;
};

class RandomLlama {
public:
    // Throws kvx::Error for a shape kvx cannot run (non-positive sizes, n_heads not a multiple of n_kv_heads,
    // odd head_dim). Matrix entries are N(0, 0.02) (as Llama's initialisation), norm weights 1, RoPE
    // frequencies those of base 500000 (Llama 3).
    RandomLlama(const LlamaShape& shape, int max_seq_len, uint64_t seed);
    RandomLlama(const RandomLlama&) = delete;
    RandomLlama& operator=(const RandomLlama&) = delete;

    const Model& model() const { return model_; }

private:
    std::vector<float> matrices_f32_;     // [shape.matrix_elements()] when the weights are fp32
    std::vector<uint16_t> matrices_f16_;  // [shape.matrix_elements()] fp16 bits when they are fp16
    std::vector<float> norm_weight_;      // [dim], all 1: every norm of the model shares it
    std::vector<float> rope_inv_freq_;    // [head_dim / 2]
    Model model_;
};

}  // namespace kvx::bench
