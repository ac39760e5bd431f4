// Hyperparameters of a converted model, read from MODEL_DIR/config.json (docs/model-format.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvx {

struct ModelConfig {
    std::string architecture;  // "llama"
    int dim = 0;               // residual stream width
    int hidden_dim = 0;        // MLP inner width
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    int vocab_size = 0;
    int max_seq_len = 0;
    float norm_eps = 1e-5f;
    bool tied_embeddings = true;
    int bos_token_id = -1;
    std::vector<int> eos_token_ids;
    std::string weights_file;    // relative to the model directory
    std::string tokenizer_type;  // "llama2c", "bpe" (HF tokenizer.json), "gpt2" (encoder.json), or empty for none
    std::string tokenizer_file;  // relative to the model directory
    std::string tokenizer_merges_file;  // "gpt2" only: vocab.bpe, relative to the model directory
    std::string chat_template_file;     // a Jinja chat template, relative to the model directory; empty for none

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
};

// Throws kvx::Error naming the file and the field that is missing, mistyped or out of range.
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace kvx
