#include "engine/model/model_config.h"

#include <cmath>
#include <filesystem>

#include "engine/files/json_file.h"
#include "engine/files/regular_file.h"
#include "engine/model/chat_format.h"
#include "kernels/error.h"

namespace kvx {
namespace {

using nlohmann::json;

// Field readers naming the file and the field in every message. A field of the wrong JSON type is an error:
// a config from the internet must not be able to slip a default past kvx (an eos id of 2.7 becoming 2).
class ConfigReader {
public:
    ConfigReader(const json& j, const std::string& path) : j_(j), path_(path) {}

    std::string where(const std::string& field) const { return "model config '" + path_ + "': '" + field + "'"; }
    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw Error(where(field) + " " + what);
    }

    bool has(const json& object, const char* key) const { return object.contains(key) && !object[key].is_null(); }
    const json& required(const json& object, const char* key, const std::string& field) const {
        if (!object.contains(key)) fail(field, "is missing");
        return object[key];
    }

    int64_t integer(const json& value, int64_t lo, int64_t hi, const std::string& field) const {
        return json_integer(value, lo, hi, where(field));
    }
    int size(const char* key, int64_t max) const {
        return static_cast<int>(integer(required(j_, key, key), 1, max, key));
    }
    std::string string(const json& value, const std::string& field) const {
        if (!value.is_string()) fail(field, "must be a string, not " + json_excerpt(value));
        return value.get<std::string>();
    }
    std::string optional_string(const json& object, const char* key, const std::string& field) const {
        return has(object, key) ? string(object[key], field) : std::string();
    }
    bool boolean(const json& value, const std::string& field) const {
        if (!value.is_boolean()) fail(field, "must be true or false, not " + json_excerpt(value));
        return value.get<bool>();
    }
    const json& object(const json& value, const std::string& field) const {
        if (!value.is_object()) fail(field, "must be an object, not " + json_excerpt(value));
        return value;
    }
    const json& array(const json& value, const std::string& field) const {
        if (!value.is_array()) fail(field, "must be a list, not " + json_excerpt(value));
        return value;
    }

    const json& root() const { return j_; }

private:
    const json& j_;
    const std::string& path_;
};

// "sliding_window": {"window": W, "layers": [i, ...]}: W >= 1, layers ascending, distinct, < n_layers.
void read_sliding_window(const ConfigReader& r, ModelConfig& c) {
    if (!r.has(r.root(), "sliding_window")) return;
    const json& sw = r.object(r.root()["sliding_window"], "sliding_window");
    c.sliding_window = static_cast<int>(
        r.integer(r.required(sw, "window", "sliding_window.window"), 1, int64_t{1} << 30, "sliding_window.window"));
    for (const json& layer : r.array(r.required(sw, "layers", "sliding_window.layers"), "sliding_window.layers")) {
        const auto i = static_cast<int>(r.integer(layer, 0, c.n_layers - 1, "sliding_window.layers"));
        if (!c.sliding_window_layers.empty() && i <= c.sliding_window_layers.back())
            r.fail("sliding_window.layers", "must be ascending and list each layer once");
        c.sliding_window_layers.push_back(i);
    }
    if (c.sliding_window_layers.empty()) r.fail("sliding_window.layers", "lists no layer");
}

// A finite number in [lo, hi]; the field's default when absent or null.
float number(const ConfigReader& r, const char* key, double lo, double hi, float fallback) {
    if (!r.has(r.root(), key)) return fallback;
    const json& v = r.root()[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo || v.get<double>() > hi)
        r.fail(key, "must be a number from " + json(lo).dump() + " to " + json(hi).dump() + ", not " + json_excerpt(v));
    return v.get<float>();
}

// One of `choices` (a JSON string), or fallback when absent.
std::string choice(const ConfigReader& r, const char* key, std::initializer_list<const char*> choices,
                   const char* fallback) {
    if (!r.has(r.root(), key)) return fallback;
    const std::string value = r.string(r.root()[key], key);
    std::string names;
    for (const char* ch : choices) {
        if (value == ch) return value;
        names += (names.empty() ? "" : ", ") + std::string(ch);
    }
    r.fail(key, "= '" + value + "' is not one of " + names);
}

// config.json's "norm", "positions" and "mlp": the kinds of families.json (architecture.h) in place of the
// architecture row's. Read before anything that depends on them (RoPE's checks, the weights a layer has).
void read_kind_overrides(const ConfigReader& r, ModelConfig& c) {
    auto kind = [&](const char* key, const char* what, auto find, const std::string& names, auto& into) {
        if (!r.has(r.root(), key)) return;
        const std::string name = r.string(r.root()[key], key);
        const auto* found = find(name);
        if (!found) r.fail(key, "= '" + name + "' is not " + what + " kvx computes (" + names + ")");
        into = *found;
    };
    kind("norm", "a norm", find_norm_kind, norm_kind_names(), c.traits.norm);
    kind("positions", "a position encoding", find_position_kind, position_kind_names(), c.traits.positions);
    kind("mlp", "an MLP", find_mlp_kind, mlp_kind_names(), c.traits.mlp);
}

// "qk_norm": true or "head" (per head), "projection" (the whole projection), false or absent (none).
QkNorm read_qk_norm(const ConfigReader& r) {
    if (!r.has(r.root(), "qk_norm")) return QkNorm::none;
    const json& v = r.root()["qk_norm"];
    if (v.is_boolean()) return v.get<bool>() ? QkNorm::head : QkNorm::none;
    if (v == "head") return QkNorm::head;
    if (v == "projection") return QkNorm::projection;
    r.fail("qk_norm", "must be true, false, \"head\" or \"projection\", not " + json_excerpt(v));
}

// The layer options of model_config.h: every one typed and range-checked, its default a plain layer's.
void read_layer_options(const ConfigReader& r, ModelConfig& c) {
    const json& j = r.root();
    c.norm_weight_offset = number(r, "norm_weight_offset", 0, 1, 0.0f);
    if (c.norm_weight_offset != 0.0f && c.norm_weight_offset != 1.0f)
        r.fail("norm_weight_offset", "must be 0 or 1, not " + json_excerpt(j["norm_weight_offset"]));
    c.qk_norm = read_qk_norm(r);
    if (c.qk_norm != QkNorm::none && c.traits.norm != NormKind::rms) r.fail("qk_norm", "needs an RMSNorm family");
    const std::string placement = choice(r, "norm_placement", {"pre", "sandwich", "post"}, "pre");
    c.norm_placement = placement == "sandwich" ? NormPlacement::sandwich
                       : placement == "post"   ? NormPlacement::post
                                               : NormPlacement::pre;
    c.parallel_residual = choice(r, "residual", {"sequential", "parallel"}, "sequential") == "parallel";
    if (c.norm_placement != NormPlacement::pre && c.parallel_residual)
        r.fail("norm_placement", "\"" + placement + "\" with 'residual' \"parallel\" is not a layer kvx computes");
    c.clip_qkv = number(r, "clip_qkv", 1e-6, 1e6, 0.0f);
    c.residual_scale = number(r, "residual_scale", 1e-6, 1e6, 1.0f);
    if (r.has(j, "rotary_dim")) {
        if (!c.traits.rotary()) r.fail("rotary_dim", "is for rotary positions only");
        c.rotary_dim = static_cast<int>(r.integer(j["rotary_dim"], 2, c.head_dim, "rotary_dim"));
        if (c.rotary_dim % 2 != 0) r.fail("rotary_dim", "must be even, not " + std::to_string(c.rotary_dim));
    }
    if (r.has(j, "rope_local_layers")) {
        if (!c.traits.rotary()) r.fail("rope_local_layers", "is for rotary positions only");
        for (const json& layer : r.array(j["rope_local_layers"], "rope_local_layers")) {
            const auto i = static_cast<int>(r.integer(layer, 0, c.n_layers - 1, "rope_local_layers"));
            if (!c.rope_local_layers.empty() && i <= c.rope_local_layers.back())
                r.fail("rope_local_layers", "must be ascending and list each layer once");
            c.rope_local_layers.push_back(i);
        }
    }
    c.embedding_scale = number(r, "embedding_scale", 1e-6, 1e6, 1.0f);
    c.attention_scale = number(r, "attention_scale", 1e-6, 1e6, 0.0f);
    c.attn_logit_softcap = number(r, "attn_logit_softcap", 1e-3, 1e6, 0.0f);
    c.logit_scale = number(r, "logit_scale", 1e-6, 1e6, 1.0f);
    c.final_logit_softcap = number(r, "final_logit_softcap", 1e-3, 1e6, 0.0f);
}

void read_token_ids(const ConfigReader& r, ModelConfig& c) {
    const json& j = r.root();
    const int64_t last = c.vocab_size - 1;
    if (r.has(j, "bos_token_id")) c.bos_token_id = static_cast<int>(r.integer(j["bos_token_id"], -1, last, "bos_token_id"));
    if (r.has(j, "eos_token_ids"))
        for (const json& id : r.array(j["eos_token_ids"], "eos_token_ids"))
            c.eos_token_ids.push_back(static_cast<int>(r.integer(id, 0, last, "eos_token_ids")));
}

// tokenizer.<key>: token ids, ascending, each once, each in the vocabulary; llama2c only.
void read_piece_ids(const ConfigReader& r, const ModelConfig& c, const json& t, const char* key,
                    std::vector<int32_t>& ids) {
    if (!r.has(t, key)) return;
    const std::string field = std::string("tokenizer.") + key;
    if (c.tokenizer_type != "llama2c") r.fail(field, "is for the llama2c tokenizer only");
    for (const json& id : r.array(t[key], field)) {
        const auto i = static_cast<int32_t>(r.integer(id, 0, c.vocab_size - 1, field));
        if (!ids.empty() && i <= ids.back()) r.fail(field, "must be ascending and list each id once");
        ids.push_back(i);
    }
}

void read_tokenizer(const ConfigReader& r, ModelConfig& c) {
    if (!r.has(r.root(), "tokenizer")) return;
    const json& t = r.object(r.root()["tokenizer"], "tokenizer");
    c.tokenizer_type = r.string(r.required(t, "type", "tokenizer.type"), "tokenizer.type");
    if (c.tokenizer_type != "llama2c" && c.tokenizer_type != "bpe" && c.tokenizer_type != "gpt2")
        r.fail("tokenizer.type", "= '" + c.tokenizer_type + "' is not a tokenizer kvx reads (llama2c, bpe, gpt2)");
    c.tokenizer_file = r.string(r.required(t, "file", "tokenizer.file"), "tokenizer.file");
    if (c.tokenizer_type == "gpt2")
        c.tokenizer_merges_file = r.string(r.required(t, "merges_file", "tokenizer.merges_file"), "tokenizer.merges_file");
    // SentencePiece's add_dummy_prefix: absent means on, what every llama2.c tokenizer.bin was made with.
    if (r.has(t, "add_dummy_prefix")) {
        if (c.tokenizer_type != "llama2c") r.fail("tokenizer.add_dummy_prefix", "is for the llama2c tokenizer only");
        c.tokenizer_add_dummy_prefix = r.boolean(t["add_dummy_prefix"], "tokenizer.add_dummy_prefix");
    }
    read_piece_ids(r, c, t, "user_defined_ids", c.tokenizer_user_defined_ids);
    read_piece_ids(r, c, t, "control_ids", c.tokenizer_control_ids);
}

void read_chat(const ConfigReader& r, ModelConfig& c) {
    if (!r.has(r.root(), "chat")) return;
    const json& chat = r.object(r.root()["chat"], "chat");
    c.has_chat = true;
    c.chat.template_file = r.string(r.required(chat, "template_file", "chat.template_file"), "chat.template_file");
    c.chat.format = r.optional_string(chat, "format", "chat.format");
    c.chat.unsupported_reason = r.optional_string(chat, "unsupported", "chat.unsupported");
    if (r.has(chat, "default_system")) {
        c.chat.has_default_system = true;
        c.chat.default_system = r.string(chat["default_system"], "chat.default_system");
    }
    if (!c.chat.format.empty() && !find_chat_format(c.chat.format))
        r.fail("chat.format", "= '" + c.chat.format + "' is not a format kvx applies (" +
                                  std::string(chat_format_names()) + ")");
    if (r.has(chat, "add_bos")) c.chat.add_bos = r.boolean(chat["add_bos"], "chat.add_bos");
    if (c.chat.add_bos && c.bos_token_id < 0) r.fail("chat.add_bos", "is true but the model has no bos_token_id");
}

}  // namespace

int ModelConfig::q_norm_width() const {
    return qk_norm == QkNorm::projection ? q_dim() : qk_norm == QkNorm::head ? head_dim : 0;
}

int ModelConfig::k_norm_width() const {
    return qk_norm == QkNorm::projection ? kv_dim() : qk_norm == QkNorm::head ? head_dim : 0;
}

float ModelConfig::q_k_scale() const {
    return attention_scale > 0.0f ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

ModelConfig load_model_config(const std::string& model_dir) {
    const std::string path = model_dir + "/config.json";
    if (!std::filesystem::exists(path)) throw Error("no model at '" + model_dir + "': it has no config.json");
    const json j = read_json_object(path, "model config", ConfigLimits::file_bytes);
    const ConfigReader r(j, path);
    if (!j.contains("format") || j["format"] != "kvx-model")
        throw Error("'" + path + "' is not a kvx model config (run 'kvx convert' on an ONNX file first)");
    if (!j.contains("format_version") || j["format_version"] != 1)
        throw Error("model config '" + path + "': unsupported format_version (this kvx reads version 1)");

    ModelConfig c;
    const std::string architecture = r.string(r.required(j, "architecture", "architecture"), "architecture");
    const ArchitectureTraits* traits = find_architecture(architecture);
    if (!traits) r.fail("architecture", "= '" + architecture + "' is not a family kvx runs (" + architecture_names() + ")");
    c.traits = *traits;
    read_kind_overrides(r, c);
    c.dim = r.size("dim", ConfigLimits::dim);
    c.hidden_dim = r.size("hidden_dim", ConfigLimits::hidden_dim);
    c.n_layers = r.size("n_layers", ConfigLimits::layers);
    c.n_heads = r.size("n_heads", ConfigLimits::heads);
    c.n_kv_heads = r.size("n_kv_heads", c.n_heads);
    c.head_dim = r.size("head_dim", ConfigLimits::head_dim);
    c.vocab_size = r.size("vocab_size", ConfigLimits::vocab_size);
    c.max_seq_len = r.size("max_seq_len", ConfigLimits::seq_len);
    // The one product the loader, the plan and the kernels count in int: it is checked here, once.
    if (int64_t{c.n_heads} * c.head_dim > ConfigLimits::width)
        r.fail("n_heads", "x 'head_dim' = " + std::to_string(int64_t{c.n_heads} * c.head_dim) + " is more than " +
                              std::to_string(ConfigLimits::width));
    if (c.n_heads % c.n_kv_heads != 0)
        r.fail("n_heads", "= " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
                              std::to_string(c.n_kv_heads));
    if (c.traits.rotary() && c.head_dim % 2 != 0) r.fail("head_dim", "must be even for RoPE");

    const json& eps = r.required(j, "norm_eps", "norm_eps");
    if (!eps.is_number() || !std::isfinite(eps.get<double>()) || eps.get<double>() <= 0 || eps.get<double>() >= 1)
        r.fail("norm_eps", "must be a number above 0 and below 1, not " + json_excerpt(eps));
    c.norm_eps = eps.get<float>();
    if (c.traits.rotary() && (!j.contains("rope_style") || j["rope_style"] != "half"))
        r.fail("rope_style", "must be \"half\" (the rotation kvx implements)");
    if (r.has(j, "tied_embeddings")) c.tied_embeddings = r.boolean(j["tied_embeddings"], "tied_embeddings");
    read_sliding_window(r, c);
    read_layer_options(r, c);
    read_token_ids(r, c);

    const json& weights = r.object(r.required(j, "weights", "weights"), "weights");
    c.weights_file = r.string(r.required(weights, "file", "weights.file"), "weights.file");
    const std::string dtype = r.string(r.required(weights, "dtype", "weights.dtype"), "weights.dtype");
    if (dtype == "f32")
        c.weights_dtype = WeightDtype::f32;
    else if (dtype == "f16")
        c.weights_dtype = WeightDtype::f16;
    else
        r.fail("weights.dtype", "= '" + dtype + "' is not a dtype kvx reads (f32, f16)");
    if (r.has(weights, "x_rounding")) {
        const std::string rounding = r.string(weights["x_rounding"], "weights.x_rounding");
        if (rounding == "ggml")
            c.x_rounding = QuantXRounding::ggml;
        else if (rounding != "onnxruntime")
            r.fail("weights.x_rounding", "= '" + rounding + "' is not a rounding kvx knows (onnxruntime, ggml)");
    }
    read_tokenizer(r, c);
    read_chat(r, c);

    // Every file the config names stays inside the folder, checked before anything opens it.
    file_inside(model_dir, c.weights_file, "weights.file");
    if (!c.tokenizer_file.empty()) file_inside(model_dir, c.tokenizer_file, "tokenizer.file");
    if (!c.tokenizer_merges_file.empty()) file_inside(model_dir, c.tokenizer_merges_file, "tokenizer.merges_file");
    if (c.has_chat) file_inside(model_dir, c.chat.template_file, "chat.template_file");
    return c;
}

}  // namespace kvx
