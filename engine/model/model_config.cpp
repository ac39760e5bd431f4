#include "engine/model/model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/error.h"

namespace kvx {
namespace {

using nlohmann::json;

int positive_int(const json& j, const std::string& key, const std::string& path) {
    if (!j.contains(key) || !j[key].is_number_integer())
        throw Error("model config '" + path + "': missing integer field '" + key + "'");
    const auto v = j[key].get<int64_t>();
    if (v <= 0 || v > (int64_t{1} << 30))
        throw Error("model config '" + path + "': field '" + key + "' = " + std::to_string(v) + " is out of range");
    return static_cast<int>(v);
}

// A file named by entry.key, relative to the model directory.
std::string file_name(const json& entry, const std::string& key, const std::string& what, const std::string& path) {
    if (!entry.is_object() || !entry.contains(key) || !entry[key].is_string() || entry[key].get<std::string>().empty())
        throw Error("model config '" + path + "': '" + what + "' has no '" + key + "'");
    return entry[key].get<std::string>();
}

// "sliding_window": {"window": W, "layers": [i, ...]}: W >= 1, layers ascending, distinct, < n_layers.
void read_sliding_window(const json& j, const std::string& path, ModelConfig& c) {
    if (!j.contains("sliding_window")) return;
    const json& sw = j["sliding_window"];
    const std::string where = "model config '" + path + "': 'sliding_window' ";
    if (!sw.is_object() || !sw.contains("layers") || !sw["layers"].is_array())
        throw Error(where + "must be {\"window\": W, \"layers\": [...]}");
    if (!sw.contains("window") || !sw["window"].is_number_integer())
        throw Error(where + "has no integer 'window'");
    const auto window = sw["window"].get<int64_t>();
    if (window < 1 || window > (int64_t{1} << 30))
        throw Error(where + "'window' = " + std::to_string(window) + " is out of range");
    c.sliding_window = static_cast<int>(window);
    for (const json& layer : sw["layers"]) {
        if (!layer.is_number_integer()) throw Error(where + "has a layer that is not an integer");
        const auto i = layer.get<int64_t>();
        if (i < 0 || i >= c.n_layers)
            throw Error(where + "names layer " + std::to_string(i) + " of a model with " + std::to_string(c.n_layers) +
                        " layers");
        if (!c.sliding_window_layers.empty() && i <= c.sliding_window_layers.back())
            throw Error(where + "layers must be ascending and listed once");
        c.sliding_window_layers.push_back(static_cast<int>(i));
    }
    if (c.sliding_window_layers.empty()) throw Error(where + "lists no layer");
}

}  // namespace

ModelConfig load_model_config(const std::string& model_dir) {
    const std::string path = model_dir + "/config.json";
    std::ifstream in(path);
    if (!in) throw Error("no model at '" + model_dir + "': cannot read " + path);
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error("model config '" + path + "' is not valid JSON");
    if (j.value("format", "") != "kvx-model")
        throw Error("'" + path + "' is not a kvx model config (run 'kvx convert' on an ONNX file first)");
    if (j.value("format_version", 0) != 1)
        throw Error("model config '" + path + "': unsupported format_version (this kvx reads version 1)");

    ModelConfig c;
    const std::string architecture = j.value("architecture", "");
    const ArchitectureTraits* traits = find_architecture(architecture);
    if (!traits)
        throw Error("model config '" + path + "': unsupported architecture '" + architecture + "' (kvx runs " +
                    architecture_names() + ")");
    c.traits = *traits;
    c.dim = positive_int(j, "dim", path);
    c.hidden_dim = positive_int(j, "hidden_dim", path);
    c.n_layers = positive_int(j, "n_layers", path);
    c.n_heads = positive_int(j, "n_heads", path);
    c.n_kv_heads = positive_int(j, "n_kv_heads", path);
    c.head_dim = positive_int(j, "head_dim", path);
    c.vocab_size = positive_int(j, "vocab_size", path);
    c.max_seq_len = positive_int(j, "max_seq_len", path);
    if (c.n_heads % c.n_kv_heads != 0)
        throw Error("model config '" + path + "': n_heads " + std::to_string(c.n_heads) +
                    " is not a multiple of n_kv_heads " + std::to_string(c.n_kv_heads));
    if (c.traits.rotary() && c.head_dim % 2 != 0)
        throw Error("model config '" + path + "': head_dim must be even for RoPE");
    if (!j.contains("norm_eps") || !j["norm_eps"].is_number())
        throw Error("model config '" + path + "': missing number field 'norm_eps'");
    c.norm_eps = j["norm_eps"].get<float>();
    if (c.traits.rotary() && j.value("rope_style", "") != "half")
        throw Error("model config '" + path + "': unsupported rope_style (kvx implements 'half')");
    c.tied_embeddings = j.value("tied_embeddings", true);
    read_sliding_window(j, path, c);
    c.bos_token_id = j.value("bos_token_id", -1);
    if (j.contains("eos_token_ids") && j["eos_token_ids"].is_array())
        for (const auto& t : j["eos_token_ids"]) c.eos_token_ids.push_back(t.get<int>());
    for (int t : c.eos_token_ids)
        if (t < 0 || t >= c.vocab_size) throw Error("model config '" + path + "': eos token id out of the vocabulary");
    if (c.bos_token_id >= c.vocab_size) throw Error("model config '" + path + "': bos_token_id out of the vocabulary");

    if (!j.contains("weights") || !j["weights"].is_object())
        throw Error("model config '" + path + "': missing 'weights'");
    c.weights_file = j["weights"].value("file", "");
    const std::string dtype = j["weights"].value("dtype", "");
    if (dtype == "f32")
        c.weights_dtype = WeightDtype::f32;
    else if (dtype == "f16")
        c.weights_dtype = WeightDtype::f16;
    else
        throw Error("model config '" + path + "': unsupported weights dtype '" + dtype + "' (kvx reads f32 and f16)");
    if (j.contains("tokenizer") && j["tokenizer"].is_object()) {
        const json& t = j["tokenizer"];
        c.tokenizer_type = t.value("type", "");
        if (c.tokenizer_type != "llama2c" && c.tokenizer_type != "bpe" && c.tokenizer_type != "gpt2")
            throw Error("model config '" + path + "': unsupported tokenizer type '" + c.tokenizer_type +
                        "' (kvx reads llama2c, bpe and gpt2)");
        c.tokenizer_file = file_name(t, "file", "tokenizer", path);
        if (c.tokenizer_type == "gpt2") c.tokenizer_merges_file = file_name(t, "merges_file", "tokenizer", path);
    }
    if (j.contains("chat") && j["chat"].is_object()) {
        const json& chat = j["chat"];
        c.has_chat = true;
        c.chat.template_file = file_name(chat, "template_file", "chat", path);
        if (chat.contains("format") && chat["format"].is_string()) c.chat.format = chat["format"].get<std::string>();
        c.chat.unsupported_reason = chat.value("unsupported", "");
        if (chat.contains("default_system") && chat["default_system"].is_string()) {
            c.chat.has_default_system = true;
            c.chat.default_system = chat["default_system"].get<std::string>();
        }
        if (!c.chat.format.empty() && c.chat.format != "chatml")
            throw Error("model config '" + path + "': unknown chat format '" + c.chat.format + "' (kvx applies 'chatml')");
    }
    return c;
}

}  // namespace kvx
