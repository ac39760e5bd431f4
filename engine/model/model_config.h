// Hyperparameters of a converted model, read from MODEL_DIR/config.json (docs/model-format.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/architecture.h"

namespace kvx {

// How the weight matrices (linear layers and embeddings) are stored; vectors (norms, biases, RoPE
// frequencies) are always f32.
enum class WeightDtype { f32, f16 };

// How to turn a conversation into tokens. The converter renders the model's Jinja chat template with
// jinja2 on probe conversations and records the format when the output matches one kvx knows
// (tools/kvx_tools/convert/chat_template.py); kvx never interprets Jinja itself.
struct ChatConfig {
    std::string template_file;       // the template as the model ships it, relative to the model directory
    std::string format;              // "chatml", or empty when the template is not one kvx can apply
    std::string unsupported_reason;  // why not, when format is empty
    bool has_default_system = false; // the template inserts a system message when the conversation has none
    std::string default_system;
};

struct ModelConfig {
    ArchitectureTraits traits = *find_architecture("llama");  // the family's choices (architecture.h)
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
    // Sliding-window attention (HF / Mistral convention): on the layers listed, a query at position p sees
    // keys p - W + 1 .. p; the other layers see the whole sequence. 0 and no layers: none.
    int sliding_window = 0;
    std::vector<int> sliding_window_layers;  // ascending, each once
    int bos_token_id = -1;
    std::vector<int> eos_token_ids;
    std::string weights_file;    // relative to the model directory
    WeightDtype weights_dtype = WeightDtype::f32;
    std::string tokenizer_type;  // "llama2c", "bpe" (HF tokenizer.json), "gpt2" (encoder.json), or empty for none
    std::string tokenizer_file;  // relative to the model directory
    std::string tokenizer_merges_file;  // "gpt2" only: vocab.bpe, relative to the model directory
    bool has_chat = false;       // the model came with a chat template
    ChatConfig chat;

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
};

// Throws kvx::Error naming the file and the field that is missing, mistyped or out of range.
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace kvx
