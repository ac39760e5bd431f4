// Hyperparameters of a converted model, read from MODEL_DIR/config.json (docs/model-format.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/architecture.h"
#include "kernels/quant_matrix.h"

namespace kvx {

// What kvx accepts from a config.json: beyond every model it is meant to run, and small enough that no product
// of fields overflows where it is counted (q_dim() and kv_dim() in int stay below ConfigLimits::width; a weight's
// element count, vocab_size x dim, in int64), and that a crafted file cannot make kvx allocate for a context
// of 2^30 before anything else is checked.
struct ConfigLimits {
    static constexpr int64_t dim = 1 << 16;         // residual width
    static constexpr int64_t hidden_dim = 1 << 18;  // MLP inner width
    static constexpr int64_t layers = 1024;
    static constexpr int64_t heads = 1024;
    static constexpr int64_t head_dim = 4096;
    static constexpr int64_t width = 1 << 18;       // n_heads x head_dim
    static constexpr int64_t vocab_size = 1 << 22;
    static constexpr int64_t seq_len = 1 << 24;
    static constexpr size_t file_bytes = 16 << 20;  // config.json itself; a real one is a few KB
};

// How the weight matrices (linear layers and embeddings) are stored; vectors (norms, biases, RoPE
// frequencies) are always f32.
// How a matrix is stored. config.json's weights.dtype is f32 or f16 (the matrices that are not quantized);
// a quantized matrix is q8 or q4 whatever that says (docs/model-format.md, "Quantized matrices").
enum class WeightDtype { f32, f16, q8, q4 };

// How to turn a conversation into tokens. The converter renders the model's Jinja chat template with
// jinja2 on probe conversations and records the format when the output matches one kvx knows
// (chat_format.h, tools/kvx_tools/convert/tokenizer/chat_template.py); kvx never interprets Jinja itself.
struct ChatConfig {
    std::string template_file;       // the template as the model ships it, relative to the model directory
    std::string format;              // a chat_format.h name, or empty when the template is not one kvx can apply
    bool add_bos = false;            // the template writes the BOS token before the conversation (Gemma's)
    std::string unsupported_reason;  // why not, when format is empty
    bool has_default_system = false; // the template inserts a system message when the conversation has none
    std::string default_system;
};

// Where a layer's norms sit (config.json's "norm_placement").
enum class NormPlacement {
    pre,       // x + attn(attn_norm(x)), then x + mlp(ffn_norm(x)): Llama, GPT-2
    sandwich,  // x + post_attn_norm(attn(attn_norm(x))), likewise the MLP: Gemma 2/3
    post,      // x + post_attn_norm(attn(x)), then x + post_ffn_norm(mlp(x)): no pre-norms (OLMo 2)
};

// RMSNorm of the queries and keys after their projections, before RoPE (config.json's "qk_norm").
enum class QkNorm {
    none,
    head,        // true or "head": each head of q and k a row of head_dim (Qwen 3, Gemma 3)
    projection,  // "projection": the whole q row [n_heads * head_dim] and k row [n_kv_heads * head_dim] (OLMo 2)
};

struct ModelConfig {
    // The family's choices (architecture.h): the "architecture" row of families.json, with config.json's
    // "norm", "positions" and "mlp" in place of the row's where it has them.
    ArchitectureTraits traits = *find_architecture("llama");
    int dim = 0;               // residual stream width
    int hidden_dim = 0;        // MLP inner width
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    int vocab_size = 0;
    int max_seq_len = 0;
    float norm_eps = 1e-5f;    // every norm's, the q/k norms' too
    bool tied_embeddings = true;
    // Sliding-window attention (HF / Mistral convention): on the layers listed, a query at position p sees
    // keys p - W + 1 .. p; the other layers see the whole sequence. 0 and no layers: none.
    int sliding_window = 0;
    std::vector<int> sliding_window_layers;  // ascending, each once
    // The layer's differences between families, as data the forward pass reads (docs/model-format.md,
    // "Layer options"); each has the value of a plain Llama / GPT-2 layer when its field is absent.
    float norm_weight_offset = 0.0f;  // 0 or 1: added to every norm weight at load, in fp32 (Gemma's 1 + w)
    QkNorm qk_norm = QkNorm::none;    // q_norm / k_norm, q_norm_width() / k_norm_width() wide
    NormPlacement norm_placement = NormPlacement::pre;  // which of attn/ffn_norm and post_attn/post_ffn_norm exist
    bool parallel_residual = false;   // x + attn(attn_norm(x)) + mlp(ffn_norm(x)) (GPT-NeoX); pre or sandwich only
    // q, k and v each clamped to [-clip_qkv, clip_qkv] right after their projections (and biases), before
    // the q/k norms and RoPE (OLMo's clip_qkv); 0 (absent): no clamp.
    float clip_qkv = 0.0f;
    // Each block's output (after its post-norm, if any) times this before it joins the residual stream
    // (Granite's residual_multiplier); 1: the plain add.
    float residual_scale = 1.0f;
    int rotary_dim = 0;               // rotated dims of each head, even, <= head_dim; 0 (absent): head_dim
    std::vector<int> rope_local_layers;  // ascending: layers whose RoPE uses rope_inv_freq_local (Gemma 3)
    float embedding_scale = 1.0f;     // the token embedding times this fp32 value (Gemma's sqrt(dim))
    float attention_scale = 0.0f;     // q.k scale; 0 (absent): 1 / sqrt(head_dim). Gemma 2/3: query_pre_attn_scalar^-0.5
    float attn_logit_softcap = 0.0f;  // scores -> cap * tanh(scores / cap); 0: none
    // logits = (classifier(x) + classifier_bias) * logit_scale, then the soft-cap (Granite's 1 / logits_scaling,
    // Cohere's logit_scale); 1: none.
    float logit_scale = 1.0f;
    float final_logit_softcap = 0.0f; // logits -> cap * tanh(logits / cap); 0: none
    int bos_token_id = -1;
    std::vector<int> eos_token_ids;
    std::string weights_file;    // relative to the model directory
    WeightDtype weights_dtype = WeightDtype::f32;
    // weights.x_rounding: how the SIMD kernels round x to int8 for the quantized matrices, as the engine the
    // weights came from does (kernels/quant_matrix.h): "onnxruntime" (the default) or "ggml" (GGUF files).
    QuantXRounding x_rounding = QuantXRounding::onnxruntime;
    std::string tokenizer_type;  // "llama2c", "bpe" (HF tokenizer.json), "gpt2" (encoder.json), or empty for none
    std::string tokenizer_file;  // relative to the model directory
    std::string tokenizer_merges_file;  // "gpt2" only: vocab.bpe, relative to the model directory
    bool tokenizer_add_dummy_prefix = true;  // "llama2c" only: SentencePiece's space before the text (Gemma: false)
    // "llama2c" only, ascending: SentencePiece's user-defined and control pieces, cut out of the text whole
    // (engine/tokenizer/whole_pieces.h)
    std::vector<int32_t> tokenizer_user_defined_ids;
    std::vector<int32_t> tokenizer_control_ids;
    bool has_chat = false;       // the model came with a chat template
    ChatConfig chat;

    int q_dim() const { return n_heads * head_dim; }     // checked <= ConfigLimits::width by load_model_config
    // Whether the layers have attn_norm / ffn_norm before their blocks, and post_attn_norm / post_ffn_norm after.
    bool pre_norms() const { return norm_placement != NormPlacement::post; }
    bool post_norms() const { return norm_placement != NormPlacement::pre; }
    // The widths of q_norm and k_norm (and of the rows they normalise): head_dim for per-head norms, the whole
    // projection's for QkNorm::projection; 0 without q/k norms.
    int q_norm_width() const;
    int k_norm_width() const;
    // rotary_dim and attention_scale with their defaults applied (0, a hand-built config's, means absent).
    int rotated_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
    float q_k_scale() const;
    int kv_dim() const { return n_kv_heads * head_dim; }
};

// Throws kvx::Error naming the file and the field that is missing, mistyped or out of range, or a file name
// that leaves the model folder. Nothing is coerced: a field of the wrong JSON type is an error, never a default.
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace kvx
