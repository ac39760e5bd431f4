#include "engine/model/gguf_model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <set>
#include <sys/stat.h>

#include "engine/model/chat_format_markers.h"
#include "kernels/error.h"
#include "kernels/f16.h"

namespace kvx {
namespace {

// What a GGUF architecture is in kvx's terms: llama.cpp's choices for it (llama-model.cpp and llama-arch.cpp
// of build 11434), as data.
struct GgufFamily {
    std::string_view gguf_name;          // general.architecture
    std::string_view kvx_architecture;   // the families.json row
    bool interleaved_rope = false;       // llama.cpp's converter permuted Q/K rows for its pairwise RoPE (LLAMA)
    bool qk_norm = false;                // attn_q_norm / attn_k_norm per head
    NormPlacement placement = NormPlacement::pre;
    bool embedding_scale_sqrt_dim = false;  // Gemma's x * sqrt(dim)
    int swa_pattern = 0;                 // layer i slides when i % pattern < pattern - 1 (llama.cpp's swa pattern)
    double local_rope_base = 0.0;        // the sliding layers' RoPE base when the file has no freq_base_swa
    bool softcaps = false;               // attn_logit_softcapping / final_logit_softcapping keys (Gemma 2)
    int big_variant_layers = 0;          // llama.cpp's 27B: q scaled by 1/sqrt(dim / n_heads), not 1/sqrt(head_dim)
};

constexpr GgufFamily kGgufFamilies[] = {
    {"llama", "llama", true},
    {"qwen2", "llama"},
    {"qwen3", "llama", false, true},
    {"gemma", "gemma", false, false, NormPlacement::pre, true},
    {"gemma2", "gemma", false, false, NormPlacement::sandwich, true, 2, 0.0, true, 46},
    {"gemma3", "gemma", false, true, NormPlacement::sandwich, true, 6, 10000.0, false, 62},
};

const GgufFamily* find_family(std::string_view name) {
    for (const GgufFamily& f : kGgufFamilies)
        if (f.gguf_name == name) return &f;
    return nullptr;
}

// llama.cpp names the end-of-generation tokens of a vocabulary by their text where the metadata does not.
constexpr std::string_view kEndOfTurnTexts[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<|endoftext|>",
                                                "<|eom_id|>", "<EOT>", "<|end_of_text|>"};

class GgufModelReader {
public:
    GgufModelReader(const GgufFile& file, Model& m, QuantLayout quant_layout)
        : f_(file), m_(m), arena_(m.owned_weights), quant_layout_(quant_layout) {}

    [[noreturn]] void fail(const std::string& what) const { f_.fail(what); }

    int64_t required_int(const std::string& key, int64_t lo, int64_t hi) const {
        const std::optional<int64_t> v = f_.integer(key);
        if (!v) fail("metadata '" + key + "' is missing");
        return checked(key, *v, lo, hi);
    }
    int64_t int_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
        const std::optional<int64_t> v = f_.integer(key);
        return v ? checked(key, *v, lo, hi) : fallback;
    }
    double real_or(const std::string& key, double fallback) const { return f_.real(key).value_or(fallback); }

    // A tensor the architecture uses, with its expected dims (fastest first); taken, so that the end can
    // refuse any the architecture does not use.
    const GgufTensor* optional(const std::string& name, std::initializer_list<int64_t> dims) {
        const GgufTensor* t = f_.find_tensor(name);
        if (!t) return nullptr;
        if (!std::equal(t->dims.begin(), t->dims.end(), dims.begin(), dims.end())) {
            std::string want, have;
            for (int64_t d : dims) want += (want.empty() ? "" : ", ") + std::to_string(d);
            for (int64_t d : t->dims) have += (have.empty() ? "" : ", ") + std::to_string(d);
            fail("tensor '" + name + "' has dims [" + have + "], the metadata implies [" + want + "]");
        }
        taken_.insert(name);
        return t;
    }
    const GgufTensor& required(const std::string& name, std::initializer_list<int64_t> dims) {
        const GgufTensor* t = optional(name, dims);
        if (!t) fail("tensor '" + name + "' is missing");
        return *t;
    }

    // A vector [n] as fp32, in the model's own memory: F32 copied, F16 and BF16 widened. Not read in place: a
    // GGUF stores a layer's norms between its matrices, and a read fault maps the whole page-cache folio it
    // lands in (up to 2 MiB on ext4), so each norm read in a forward pass kept resident up to 2 MB of the
    // matrices around it that the backend had copied and given back (140 of a SmolLM2 F32 file's 540 MB).
    const float* vector(const GgufTensor& t) {
        if (t.type != GgmlType::f32 && t.type != GgmlType::f16 && t.type != GgmlType::bf16)
            fail("tensor '" + t.name + "' is " + std::string(ggml_type_info(t.type).name) + "; a vector must be F32, F16 or BF16");
        const int64_t n = t.elements();
        auto& out = m_.owned_vectors.emplace_back(static_cast<size_t>(n));
        if (t.type == GgmlType::f32) {
            std::memcpy(out.data(), t.data, static_cast<size_t>(n) * sizeof(float));
            return out.data();
        }
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, t.data + 2 * i, 2);
            if (t.type == GgmlType::f16) {
                out[static_cast<size_t>(i)] = f16_to_f32(h);
            } else {
                const uint32_t bits = uint32_t{h} << 16;
                std::memcpy(&out[static_cast<size_t>(i)], &bits, 4);
            }
        }
        return out.data();
    }
    const float* optional_vector(const std::string& name, int64_t n) {
        const GgufTensor* t = optional(name, {n});
        return t ? vector(*t) : nullptr;
    }
    Norm norm(const std::string& name, int64_t n) { return Norm{vector(required(name, {n})), nullptr}; }

    WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols, const std::vector<int64_t>* row_order = nullptr) {
        return gguf_weight_matrix(f_, required(name, {cols, rows}), rows, cols, row_order, quant_layout_, arena_);
    }
    Linear linear(const std::string& prefix, int64_t rows, int64_t cols, const std::vector<int64_t>* row_order = nullptr) {
        Linear l{matrix(prefix + ".weight", rows, cols, row_order), nullptr};
        if (const GgufTensor* bias = optional(prefix + ".bias", {rows})) {
            const float* b = vector(*bias);
            if (row_order) {  // the bias's entries move with the rows
                auto& moved = m_.owned_vectors.emplace_back(static_cast<size_t>(rows));
                for (int64_t r = 0; r < rows; ++r) moved[static_cast<size_t>(r)] = b[(*row_order)[static_cast<size_t>(r)]];
                b = moved.data();
            }
            l.bias = b;
        }
        return l;
    }

    void check_all_taken() const {
        for (const GgufTensor& t : f_.tensors())
            if (!taken_.count(t.name)) fail("tensor '" + t.name + "' is not one this model's architecture uses");
    }

private:
    int64_t checked(const std::string& key, int64_t v, int64_t lo, int64_t hi) const {
        if (v < lo || v > hi)
            fail("metadata '" + key + "' = " + std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
        return v;
    }

    const GgufFile& f_;
    Model& m_;
    WeightArena arena_;
    QuantLayout quant_layout_;
    std::set<std::string> taken_;
};

// [rotary / 2] fp32: 1 / base^(2i / rotary), computed in double and rounded once (as the converter's RoPE
// tables are), divided by a linear scaling factor and by llama 3's per-frequency factors where given.
std::vector<float> rope_frequencies(int rotary, double base, double linear_factor, const float* factors) {
    std::vector<float> inv(static_cast<size_t>(rotary / 2));
    for (int i = 0; i < rotary / 2; ++i) {
        double f = 1.0 / std::pow(base, 2.0 * i / rotary) / linear_factor;
        if (factors) f /= factors[i];
        inv[static_cast<size_t>(i)] = static_cast<float>(f);
    }
    return inv;
}

// kvx row r of a Q or K projection whose rows llama.cpp's converter interleaved: within each head, rotate-half
// position t * head_dim / 2 + j holds the file's row 2 j + t (tools/kvx_tools/export/llama_graph.py,
// interleaved_to_rotate_half, the same permutation).
std::vector<int64_t> rotate_half_rows(int n_heads, int head_dim) {
    std::vector<int64_t> order(static_cast<size_t>(n_heads) * static_cast<size_t>(head_dim));
    for (int h = 0; h < n_heads; ++h)
        for (int t = 0; t < 2; ++t)
            for (int j = 0; j < head_dim / 2; ++j)
                order[static_cast<size_t>(h * head_dim + t * head_dim / 2 + j)] = h * head_dim + 2 * j + t;
    return order;
}

void read_config(const GgufFile& f, const GgufFamily& family, const GgufModelReader& r, ModelConfig& c) {
    const std::string a = std::string(family.gguf_name) + ".";
    c.traits = *find_architecture(family.kvx_architecture);
    c.dim = static_cast<int>(r.required_int(a + "embedding_length", 1, ConfigLimits::dim));
    c.hidden_dim = static_cast<int>(r.required_int(a + "feed_forward_length", 1, ConfigLimits::hidden_dim));
    c.n_layers = static_cast<int>(r.required_int(a + "block_count", 1, ConfigLimits::layers));
    c.n_heads = static_cast<int>(r.required_int(a + "attention.head_count", 1, ConfigLimits::heads));
    c.n_kv_heads = static_cast<int>(r.int_or(a + "attention.head_count_kv", c.n_heads, 1, c.n_heads));
    if (c.n_heads % c.n_kv_heads != 0)
        r.fail("attention.head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
    c.head_dim = static_cast<int>(r.int_or(a + "attention.key_length", std::max(c.dim / c.n_heads, 1), 2, ConfigLimits::head_dim));
    if (r.int_or(a + "attention.value_length", c.head_dim, 1, ConfigLimits::head_dim) != c.head_dim)
        r.fail("attention.value_length differs from key_length, which kvx does not compute");
    if (c.head_dim % 2 != 0) r.fail("the head size " + std::to_string(c.head_dim) + " is odd; RoPE needs it even");
    if (int64_t{c.n_heads} * c.head_dim > ConfigLimits::width) r.fail("head_count x key_length is more than kvx allows");
    c.max_seq_len = static_cast<int>(r.required_int(a + "context_length", 1, ConfigLimits::seq_len));
    const double eps = r.real_or(a + "attention.layer_norm_rms_epsilon", -1.0);
    if (!(eps > 0 && eps < 1)) r.fail("metadata '" + a + "attention.layer_norm_rms_epsilon' is missing or not in (0, 1)");
    c.norm_eps = static_cast<float>(eps);
    c.rotary_dim = static_cast<int>(r.int_or(a + "rope.dimension_count", c.head_dim, 2, c.head_dim));
    if (c.rotary_dim % 2 != 0) r.fail("rope.dimension_count " + std::to_string(c.rotary_dim) + " is odd");
    if (family.interleaved_rope && c.rotary_dim != c.head_dim)
        r.fail("RoPE over " + std::to_string(c.rotary_dim) + " of " + std::to_string(c.head_dim) +
               " head dims with llama's pairwise rotation is not something kvx computes");
    c.qk_norm = family.qk_norm ? QkNorm::head : QkNorm::none;
    c.norm_placement = family.placement;
    if (family.embedding_scale_sqrt_dim) c.embedding_scale = std::sqrt(static_cast<float>(c.dim));  // sqrtf, as llama.cpp
    if (family.big_variant_layers > 0) {
        const bool big = c.n_layers == family.big_variant_layers;
        c.attention_scale = 1.0f / std::sqrt(static_cast<float>(big ? c.dim / c.n_heads : c.head_dim));
    }
    if (family.softcaps) {
        c.attn_logit_softcap = static_cast<float>(r.real_or(a + "attn_logit_softcapping", 0.0));
        c.final_logit_softcap = static_cast<float>(r.real_or(a + "final_logit_softcapping", 0.0));
        if (c.attn_logit_softcap < 0 || c.final_logit_softcap < 0) r.fail("a soft-cap is negative");
    }
    if (family.swa_pattern > 0) {
        c.sliding_window = static_cast<int>(r.required_int(a + "attention.sliding_window", 1, int64_t{1} << 30));
        for (int i = 0; i < c.n_layers; ++i)
            if (i % family.swa_pattern < family.swa_pattern - 1) c.sliding_window_layers.push_back(i);
        if (family.local_rope_base > 0) c.rope_local_layers = c.sliding_window_layers;
    }
    c.x_rounding = QuantXRounding::ggml;
    (void)f;
}

// BOS and the ids that end generation: the file's keys, and where a SentencePiece ("llama") vocabulary has none,
// llama.cpp's defaults 1 and 2 (engine/tokenizer/gguf_tokenizer.cpp applies the same); then every control token
// llama.cpp counts as an end of turn by its text.
void read_token_ids(const GgufFile& f, const GgufModelReader& r, ModelConfig& c) {
    const int64_t last = c.vocab_size - 1;
    const bool sentencepiece = f.string("tokenizer.ggml.model").value_or("") == "llama";
    c.bos_token_id = static_cast<int>(r.int_or("tokenizer.ggml.bos_token_id", sentencepiece ? 1 : -1, -1, last));
    std::set<int> eos;
    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        const bool eos_key = std::string_view(key) == "tokenizer.ggml.eos_token_id";
        const int64_t id = r.int_or(key, eos_key && sentencepiece ? 2 : -1, -1, last);
        if (id >= 0) eos.insert(static_cast<int>(id));
    }
    const std::vector<std::string_view> tokens = f.strings("tokenizer.ggml.tokens");
    const std::vector<int64_t> types = f.integers("tokenizer.ggml.token_type");
    for (size_t id = 0; id < tokens.size() && id < types.size() && static_cast<int64_t>(id) <= last; ++id)
        if (types[id] == 3)  // control
            for (std::string_view text : kEndOfTurnTexts)
                if (tokens[id] == text) eos.insert(static_cast<int>(id));
    c.eos_token_ids.assign(eos.begin(), eos.end());
}

}  // namespace

bool is_gguf_file(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

std::string gguf_architecture_names() {
    std::string names;
    for (const GgufFamily& f : kGgufFamilies) names += (names.empty() ? "" : ", ") + std::string(f.gguf_name);
    return names;
}

Model load_gguf_model(const std::string& path, QuantLayout quant_layout) {
    Model m;
    m.dir = path;
    m.gguf = std::make_unique<GgufFile>(path);
    const GgufFile& f = *m.gguf;
    GgufModelReader r(f, m, quant_layout);
    const std::optional<std::string_view> arch = f.string("general.architecture");
    if (!arch) r.fail("metadata 'general.architecture' is missing");
    const GgufFamily* family = find_family(*arch);
    if (!family)
        r.fail("architecture '" + std::string(*arch) + "' is not one kvx runs from GGUF (" + gguf_architecture_names() + ")");
    ModelConfig& c = m.config;
    read_config(f, *family, r, c);
    const std::string a = std::string(family->gguf_name) + ".";

    const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
    const GgufTensor* embedding = f.find_tensor("token_embd.weight");
    if (!embedding || embedding->dims.size() != 2 || embedding->dims[0] != dim)
        r.fail("tensor 'token_embd.weight' is missing or not [vocab][" + std::to_string(dim) + "]");
    if (embedding->dims[1] > ConfigLimits::vocab_size) r.fail("the vocabulary is larger than kvx allows");
    c.vocab_size = static_cast<int>(embedding->dims[1]);
    read_token_ids(f, r, c);
    c.tokenizer_type = "gguf";
    if (const std::optional<std::string_view> chat = f.string("tokenizer.chat_template")) {
        c.has_chat = true;
        c.chat = recognise_chat_template(*chat);
        c.chat.template_file = "tokenizer.chat_template";
    }
    c.weights_dtype = WeightDtype::f32;

    m.tok_embeddings = r.matrix("token_embd.weight", c.vocab_size, dim);
    // RoPE: the file's base (and the sliding layers' own), a linear scaling factor, llama 3's frequency factors.
    const std::string scaling(f.string(a + "rope.scaling.type").value_or("none"));
    double factor = 1.0;
    if (scaling == "linear") {
        factor = r.real_or(a + "rope.scaling.factor", 1.0);
        if (!(factor > 0)) r.fail("rope.scaling.factor must be above 0");
    } else if (scaling != "none") {
        r.fail("RoPE scaling '" + scaling + "' is not one kvx computes (none, linear)");
    }
    const float* factors = r.optional_vector("rope_freqs.weight", c.rotated_dims() / 2);
    const double base = r.real_or(a + "rope.freq_base", 10000.0);
    // Gemma 3's sliding layers keep the unscaled frequencies; its global ones are the scaled ones (llama.cpp's
    // rope_freq_scale_train_swa of 1).
    auto& global = m.owned_vectors.emplace_back(rope_frequencies(c.rotated_dims(), base, factor, factors));
    m.rope_inv_freq = global.data();
    if (!c.rope_local_layers.empty()) {
        const double local_base = r.real_or(a + "rope.freq_base_swa", family->local_rope_base);
        m.rope_inv_freq_local = m.owned_vectors.emplace_back(rope_frequencies(c.rotated_dims(), local_base, 1.0, nullptr)).data();
    }

    const std::vector<int64_t> q_rows = rotate_half_rows(c.n_heads, c.head_dim);
    const std::vector<int64_t> k_rows = rotate_half_rows(c.n_kv_heads, c.head_dim);
    const std::vector<int64_t>* q_order = family->interleaved_rope ? &q_rows : nullptr;
    const std::vector<int64_t>* k_order = family->interleaved_rope ? &k_rows : nullptr;
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        LayerWeights layer;
        if (c.pre_norms()) layer.attn_norm = r.norm(p + "attn_norm.weight", dim);
        layer.wq = r.linear(p + "attn_q", q_dim, dim, q_order);
        layer.wk = r.linear(p + "attn_k", kv_dim, dim, k_order);
        layer.wv = r.linear(p + "attn_v", kv_dim, dim);
        if (c.qk_norm == QkNorm::head) {
            layer.q_norm = r.norm(p + "attn_q_norm.weight", c.head_dim);
            layer.k_norm = r.norm(p + "attn_k_norm.weight", c.head_dim);
        }
        layer.wo = r.linear(p + "attn_output", dim, q_dim);
        if (c.post_norms()) layer.post_attn_norm = r.norm(p + "post_attention_norm.weight", dim);
        if (c.pre_norms()) layer.ffn_norm = r.norm(p + "ffn_norm.weight", dim);
        layer.w_gate = r.linear(p + "ffn_gate", hidden, dim);
        layer.w_up = r.linear(p + "ffn_up", hidden, dim);
        layer.w_down = r.linear(p + "ffn_down", dim, hidden);
        if (c.post_norms()) layer.post_ffn_norm = r.norm(p + "post_ffw_norm.weight", dim);
        m.layers.push_back(layer);
    }
    m.final_norm = r.norm("output_norm.weight", dim);
    c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    m.classifier = c.tied_embeddings ? m.tok_embeddings : r.matrix("output.weight", c.vocab_size, dim);
    r.check_all_taken();
    for (const WeightMatrix* w : {&m.tok_embeddings, &m.classifier})
        if (w->dtype == WeightDtype::f16) c.weights_dtype = WeightDtype::f16;
    for (const LayerWeights& layer : m.layers)
        for (const Linear* l : layer.linears())
            if (l->weight.dtype == WeightDtype::f16) c.weights_dtype = WeightDtype::f16;
    return m;
}

}  // namespace kvx
