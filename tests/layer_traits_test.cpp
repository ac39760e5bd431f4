// The layer traits of config.json (docs/model-format.md, "Layer options") in every combination the backends
// branch on, on tiny random models: each written as a model folder (config.json + model.safetensors), loaded,
// and run through the engine (one prefill, a prefill then decode steps, every token a decode step) against a
// forward pass in double written here from the format's definitions alone, with no cache and no kernel of
// kvx's. The CPU backend runs with the reference kernels and the best SIMD level; built with
// KVX_LAYER_TRAITS_CUDA (kvx_cuda_layer_traits_tests) the CUDA backend runs instead, skipped where no GPU (or its
// emulation) is usable. The loader's side of the traits (which tensors a layer has, their widths, the optional
// biases) is checked here too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/generation/position_logits.h"
#include "engine/model/model.h"
#include "engine/runtime/engine.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "temp_folder.h"
#ifdef KVX_LAYER_TRAITS_CUDA
#include "cuda/backend/cuda_backend.h"
#endif

namespace kvx {
namespace {

using nlohmann::json;

// A tensor of the weights file: shape and fp32 values.
struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
};
using Tensors = std::map<std::string, Tensor>;

// The safetensors format: 8 bytes of header length (little-endian), the JSON header (padded with spaces so
// that the data starts 8-byte aligned), the tensors' bytes.
void write_safetensors(const std::string& path, const Tensors& tensors) {
    json header = json::object();
    size_t offset = 0;
    for (const auto& [name, t] : tensors) {
        const size_t bytes = t.values.size() * sizeof(float);
        header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    const uint64_t length = text.size();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << text;
    for (const auto& [name, t] : tensors)
        out.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(t.values.size() * sizeof(float)));
}

struct Folder : test::TempFolder {
    Folder() : TempFolder("kvx_layer_traits") {}
};

constexpr int kDim = 16, kHidden = 24, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 6, kVocab = 40, kMaxSeq = 32;

json base_config() {
    return {{"format", "kvx-model"}, {"format_version", 1}, {"architecture", "llama"}, {"dim", kDim},
            {"hidden_dim", kHidden}, {"n_layers", kLayers}, {"n_heads", kHeads}, {"n_kv_heads", kKvHeads},
            {"head_dim", kHeadDim}, {"vocab_size", kVocab}, {"max_seq_len", kMaxSeq}, {"norm_eps", 1e-5},
            {"rope_style", "half"}, {"tied_embeddings", false},
            {"weights", {{"file", "model.safetensors"}, {"dtype", "f32"}}}};
}

// Which optional tensors a random model has beyond what its config requires.
struct Extras {
    bool linear_biases = false;      // "<linear>_bias" for every linear layer
    bool norm_biases = true;         // LayerNorm families: "<norm>_bias" (false: LayerNorm without bias)
    bool classifier_bias = false;
};

// The tensors config c asks for, random: matrices and biases in [-0.5, 0.5], norm weights around 1.
Tensors random_tensors(const ModelConfig& c, const Extras& extras, uint32_t seed) {
    std::mt19937 rng(seed);
    auto random = [&](std::vector<int64_t> shape, float lo, float hi) {
        std::uniform_real_distribution<float> u(lo, hi);
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        Tensor t{shape, std::vector<float>(static_cast<size_t>(n))};
        for (float& v : t.values) v = u(rng);
        return t;
    };
    Tensors t;
    auto linear = [&](const std::string& name, int64_t out, int64_t in) {
        t[name] = random({out, in}, -0.5f, 0.5f);
        if (extras.linear_biases) t[name + "_bias"] = random({out}, -0.5f, 0.5f);
    };
    auto norm = [&](const std::string& name, int64_t width) {
        t[name] = random({width}, 0.5f, 1.5f);
        if (c.traits.norm_has_bias() && extras.norm_biases) t[name + "_bias"] = random({width}, -0.5f, 0.5f);
    };
    t["tok_embeddings"] = random({c.vocab_size, c.dim}, -1.0f, 1.0f);
    if (c.traits.learned_positions()) t["pos_embeddings"] = random({c.max_seq_len, c.dim}, -0.5f, 0.5f);
    if (c.traits.rotary()) {
        Tensor freq{{c.rotated_dims() / 2}, {}};
        for (int i = 0; i < c.rotated_dims() / 2; ++i)
            freq.values.push_back(static_cast<float>(std::pow(10000.0, -2.0 * i / c.rotated_dims())));
        t["rope_inv_freq"] = freq;
    }
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        if (c.pre_norms()) norm(p + "attn_norm", c.dim), norm(p + "ffn_norm", c.dim);
        if (c.post_norms()) norm(p + "post_attn_norm", c.dim), norm(p + "post_ffn_norm", c.dim);
        if (c.qk_norm != QkNorm::none)
            t[p + "q_norm"] = random({c.q_norm_width()}, 0.5f, 1.5f), t[p + "k_norm"] = random({c.k_norm_width()}, 0.5f, 1.5f);
        linear(p + "wq", c.q_dim(), c.dim);
        linear(p + "wk", c.kv_dim(), c.dim);
        linear(p + "wv", c.kv_dim(), c.dim);
        linear(p + "wo", c.dim, c.q_dim());
        if (c.traits.gated_mlp()) linear(p + "w_gate", c.hidden_dim, c.dim);
        linear(p + "w_up", c.hidden_dim, c.dim);
        linear(p + "w_down", c.dim, c.hidden_dim);
    }
    norm("final_norm", c.dim);
    if (!c.tied_embeddings) t["classifier"] = random({c.vocab_size, c.dim}, -0.5f, 0.5f);
    if (extras.classifier_bias) t["classifier_bias"] = random({c.vocab_size}, -1.0f, 1.0f);
    return t;
}

// config.json = base_config() with `fields`, and its random weights, in the folder; returns the weights.
Tensors write_model(const Folder& f, const json& fields, const Extras& extras, uint32_t seed = 1) {
    json config = base_config();
    config.update(fields);
    f.write("config.json", config.dump());
    const Tensors t = random_tensors(load_model_config(f.str()), extras, seed);
    write_safetensors((f.path / "model.safetensors").string(), t);
    return t;
}

// ---- The oracle: the forward pass of docs/model-format.md in double, every position at once ----

using Rows = std::vector<std::vector<double>>;  // [positions][width]

const Tensor* find(const Tensors& t, const std::string& name) {
    const auto it = t.find(name);
    return it == t.end() ? nullptr : &it->second;
}

// y [T][out] = x [T][in] . w^T + bias
Rows linear(const Tensors& t, const std::string& name, const Rows& x) {
    const Tensor& w = t.at(name);
    const Tensor* bias = find(t, name + "_bias");
    const size_t out = static_cast<size_t>(w.shape[0]), in = static_cast<size_t>(w.shape[1]);
    Rows y(x.size(), std::vector<double>(out));
    for (size_t r = 0; r < x.size(); ++r)
        for (size_t o = 0; o < out; ++o) {
            double sum = bias ? bias->values[o] : 0.0;
            for (size_t i = 0; i < in; ++i) sum += x[r][i] * w.values[o * in + i];
            y[r][o] = sum;
        }
    return y;
}

// Each row cut into pieces of `width` (a head, or the whole row), each normed: RMSNorm, or LayerNorm whose bias
// is the file's or zero.
Rows norm(const ModelConfig& c, const Tensors& t, const std::string& name, Rows x, bool layer, size_t width) {
    const Tensor& w = t.at(name);
    const Tensor* bias = find(t, name + "_bias");
    for (std::vector<double>& row : x)
        for (size_t start = 0; start < row.size(); start += width) {
            double mean = 0.0, var = 0.0;
            if (layer) {
                for (size_t j = 0; j < width; ++j) mean += row[start + j];
                mean /= static_cast<double>(width);
            }
            for (size_t j = 0; j < width; ++j) var += (row[start + j] - mean) * (row[start + j] - mean);
            const double inv = 1.0 / std::sqrt(var / static_cast<double>(width) + c.norm_eps);
            for (size_t j = 0; j < width; ++j)
                row[start + j] = (row[start + j] - mean) * inv * w.values[j] + (layer && bias ? bias->values[j] : 0.0);
        }
    return x;
}

Rows model_norm(const ModelConfig& c, const Tensors& t, const std::string& name, const Rows& x) {
    return norm(c, t, name, x, c.traits.norm == NormKind::layer, static_cast<size_t>(c.dim));
}

// RoPE, rotate-half pairing over the first rotary_dim of each head, at positions 0 .. T - 1; the angle is the
// fp32 product position * inv_freq, as the format defines it.
void rope(const ModelConfig& c, const Tensors& t, Rows& x, int heads) {
    const int half = c.rotated_dims() / 2;
    for (size_t pos = 0; pos < x.size(); ++pos)
        for (int h = 0; h < heads; ++h)
            for (int j = 0; j < half; ++j) {
                const double angle = static_cast<float>(static_cast<float>(pos) * t.at("rope_inv_freq").values[static_cast<size_t>(j)]);
                double& x1 = x[pos][static_cast<size_t>(h * c.head_dim + j)];
                double& x2 = x[pos][static_cast<size_t>(h * c.head_dim + j + half)];
                const double a = x1, b = x2;
                x1 = a * std::cos(angle) - b * std::sin(angle);
                x2 = b * std::cos(angle) + a * std::sin(angle);
            }
}

Rows attention(const ModelConfig& c, const Tensors& t, const std::string& p, const Rows& in) {
    Rows q = linear(t, p + "wq", in), k = linear(t, p + "wk", in), v = linear(t, p + "wv", in);
    if (c.clip_qkv > 0)
        for (Rows* m : {&q, &k, &v})
            for (auto& row : *m)
                for (double& e : row) e = std::clamp(e, -static_cast<double>(c.clip_qkv), static_cast<double>(c.clip_qkv));
    if (c.qk_norm != QkNorm::none) {
        q = norm(c, t, p + "q_norm", q, false, static_cast<size_t>(c.q_norm_width()));
        k = norm(c, t, p + "k_norm", k, false, static_cast<size_t>(c.k_norm_width()));
    }
    if (c.traits.rotary()) rope(c, t, q, c.n_heads), rope(c, t, k, c.n_kv_heads);
    const size_t hd = static_cast<size_t>(c.head_dim);
    Rows att(in.size(), std::vector<double>(static_cast<size_t>(c.q_dim())));
    for (size_t pos = 0; pos < in.size(); ++pos)
        for (int h = 0; h < c.n_heads; ++h) {
            const size_t qo = static_cast<size_t>(h) * hd, ko = static_cast<size_t>(h / (c.n_heads / c.n_kv_heads)) * hd;
            std::vector<double> scores;
            double top = -1e300;
            for (size_t key = 0; key <= pos; ++key) {
                double dot = 0.0;
                for (size_t j = 0; j < hd; ++j) dot += q[pos][qo + j] * k[key][ko + j];
                scores.push_back(dot * c.q_k_scale());
                top = std::max(top, scores.back());
            }
            double total = 0.0;
            for (double& s : scores) total += (s = std::exp(s - top));
            for (size_t key = 0; key <= pos; ++key)
                for (size_t j = 0; j < hd; ++j) att[pos][qo + j] += scores[key] / total * v[key][ko + j];
        }
    return linear(t, p + "wo", att);
}

double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x))); }

Rows mlp(const ModelConfig& c, const Tensors& t, const std::string& p, const Rows& in) {
    Rows up = linear(t, p + "w_up", in);
    const Rows gate = c.traits.gated_mlp() ? linear(t, p + "w_gate", in) : Rows{};
    for (size_t r = 0; r < up.size(); ++r)
        for (size_t j = 0; j < up[r].size(); ++j) {
            double& u = up[r][j];
            switch (c.traits.mlp) {
            case MlpKind::swiglu: u *= gate[r][j] / (1.0 + std::exp(-gate[r][j])); break;
            case MlpKind::geglu_tanh: u *= gelu_tanh(gate[r][j]); break;
            case MlpKind::gelu_tanh: u = gelu_tanh(u); break;
            case MlpKind::gelu_erf: u = 0.5 * u * (1.0 + std::erf(u / std::sqrt(2.0))); break;
            }
        }
    return linear(t, p + "w_down", up);
}

// A block's output on its way to the residual stream: the post-norm where the placement has one, the scale.
Rows block_output(const ModelConfig& c, const Tensors& t, const std::string& post_norm, Rows y) {
    if (c.post_norms()) y = model_norm(c, t, post_norm, y);
    for (auto& row : y)
        for (double& e : row) e *= c.residual_scale;
    return y;
}

void add_to(Rows& x, const Rows& y) {
    for (size_t r = 0; r < x.size(); ++r)
        for (size_t j = 0; j < x[r].size(); ++j) x[r][j] += y[r][j];
}

// [T][vocab] logits of every position of `tokens`.
std::vector<double> oracle_logits(const ModelConfig& c, const Tensors& t, const std::vector<int32_t>& tokens) {
    const size_t dim = static_cast<size_t>(c.dim);
    Rows x(tokens.size(), std::vector<double>(dim));
    for (size_t pos = 0; pos < tokens.size(); ++pos)
        for (size_t j = 0; j < dim; ++j) {
            x[pos][j] = static_cast<float>(t.at("tok_embeddings").values[static_cast<size_t>(tokens[pos]) * dim + j] * c.embedding_scale);
            if (c.traits.learned_positions()) x[pos][j] += t.at("pos_embeddings").values[pos * dim + j];
        }
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        auto input = [&](const char* pre_norm) { return c.pre_norms() ? model_norm(c, t, p + pre_norm, x) : x; };
        if (c.parallel_residual) {
            const Rows a = block_output(c, t, p + "post_attn_norm", attention(c, t, p, input("attn_norm")));
            const Rows m = block_output(c, t, p + "post_ffn_norm", mlp(c, t, p, input("ffn_norm")));
            add_to(x, a);
            add_to(x, m);
            continue;
        }
        add_to(x, block_output(c, t, p + "post_attn_norm", attention(c, t, p, input("attn_norm"))));
        add_to(x, block_output(c, t, p + "post_ffn_norm", mlp(c, t, p, input("ffn_norm"))));
    }
    x = model_norm(c, t, "final_norm", x);
    Tensors head;
    head["classifier"] = t.at(c.tied_embeddings ? "tok_embeddings" : "classifier");
    if (const Tensor* bias = find(t, "classifier_bias")) head["classifier_bias"] = *bias;
    std::vector<double> logits;
    for (const auto& row : linear(head, "classifier", x))
        for (double l : row) {
            l *= c.logit_scale;
            logits.push_back(c.final_logit_softcap > 0 ? c.final_logit_softcap * std::tanh(l / c.final_logit_softcap) : l);
        }
    return logits;
}

// ---- The backends against it ----

struct BackendChoice {
    const char* name;
    std::function<std::unique_ptr<Backend>(const Model&)> make;
};

// The CPU backend with the reference kernels and with the best SIMD level; or, in the CUDA build of this file,
// the CUDA backend alone (with and without CUDA graphs).
std::vector<BackendChoice> backends() {
#ifdef KVX_LAYER_TRAITS_CUDA
    auto cuda = [](bool graphs) {
        return [graphs](const Model& m) -> std::unique_ptr<Backend> {
            cuda::CudaBackendOptions o;
            o.cuda_graphs = graphs;
            return std::make_unique<cuda::CudaBackend>(m, o);
        };
    };
    return {{"cuda", cuda(true)}, {"cuda without graphs", cuda(false)}};
#else
    return {
        {"cpu reference", [](const Model& m) -> std::unique_ptr<Backend> {
             return std::make_unique<cpu::CpuBackend>(m, reference_kernels());
         }},
        {"cpu best SIMD level", [](const Model& m) -> std::unique_ptr<Backend> {
             return std::make_unique<cpu::CpuBackend>(m, cpu::cpu_kernels(cpu::best_simd_level()));
         }},
    };
#endif
}

const std::vector<int32_t> kTokens = {3, 17, 0, 39, 8, 8, 21, 5, 30, 12, 1};

void check_against_oracle(const json& fields, const Extras& extras) {
    const Folder f;
    const Tensors t = write_model(f, fields, extras);
    const Model model = load_model(f.str());
    const std::vector<double> want = oracle_logits(model.config, t, kTokens);
    double scale = 0.0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (const BackendChoice& b : backends()) {
        for (size_t n_prefill : {kTokens.size(), size_t{4}, size_t{1}}) {
            EngineOptions o;
            o.block_size = 4;  // several blocks per sequence
            Engine engine(model.config, b.make(model), o);
            const std::vector<float> got = position_logits(engine, kTokens, n_prefill);
            REQUIRE(got.size() == want.size());
            double worst = 0.0;
            for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
            INFO(fields.dump() << " on " << b.name << ", prefill " << n_prefill << ": max|kvx - oracle| / max|oracle| = "
                               << worst / scale);
            CHECK(worst <= 1e-5 * scale);
        }
    }
}

TEST_CASE("every combination of norm, positions and MLP kind matches the oracle", "[layer_traits][forward]") {
    for (const char* norm : {"rms", "layer"})
        for (const char* positions : {"rotary", "learned"})
            for (const char* mlp : {"swiglu", "geglu_tanh", "gelu_tanh", "gelu"}) {
                const json fields = {{"norm", norm}, {"positions", positions}, {"mlp", mlp}};
                check_against_oracle(fields, Extras{.linear_biases = std::string(norm) == "layer"});
            }
}

TEST_CASE("each layer trait matches the oracle, alone and as the families combine them", "[layer_traits][forward]") {
    const struct {
        const char* what;
        json fields;
        Extras extras;
    } cases[] = {
        {"LayerNorm without bias, classifier bias (Cohere's norms, Phi's head)", {{"norm", "layer"}},
         {.norm_biases = false, .classifier_bias = true}},
        {"a tied head with a bias", {{"tied_embeddings", true}}, {.classifier_bias = true}},
        {"OLMo 2: post-norms, q/k norms over the projection",
         {{"norm_placement", "post"}, {"qk_norm", "projection"}}, {}},
        {"q/k norms per head with sandwich norms", {{"norm_placement", "sandwich"}, {"qk_norm", true}}, {}},
        {"OLMo: clip_qkv that binds, LayerNorm without bias",
         {{"norm", "layer"}, {"clip_qkv", 0.4}}, {.linear_biases = true, .norm_biases = false}},
        {"clip before the q/k norm", {{"clip_qkv", 0.3}, {"qk_norm", "projection"}, {"norm_placement", "post"}}, {}},
        {"Granite: embedding, attention, residual and logit scales",
         {{"embedding_scale", 12.0}, {"attention_scale", 0.0078125}, {"residual_scale", 0.22}, {"logit_scale", 0.125},
          {"tied_embeddings", true}}, {}},
        {"residual scale with a parallel residual (both blocks scaled), logit scale before the soft-cap",
         {{"norm", "layer"}, {"residual", "parallel"}, {"residual_scale", 0.5}, {"logit_scale", 4.0},
          {"final_logit_softcap", 3.0}}, {.norm_biases = false}},
        {"residual scale with sandwich norms (scaled after the post-norm)",
         {{"norm_placement", "sandwich"}, {"residual_scale", 1.7}}, {}},
        {"post-norms with a LayerNorm and learned positions",
         {{"norm", "layer"}, {"positions", "learned"}, {"norm_placement", "post"}}, {.linear_biases = true}},
        {"partial rotary with LayerNorm and GELU (StarCoder 2, Phi)",
         {{"norm", "layer"}, {"mlp", "gelu_tanh"}, {"rotary_dim", 4}, {"residual", "parallel"}},
         {.linear_biases = true, .classifier_bias = true}},
    };
    for (const auto& c : cases) {
        INFO(c.what);
        check_against_oracle(c.fields, c.extras);
    }
}

// ---- The loader ----

TEST_CASE("the loader takes the tensors each trait names, at their widths, and no others", "[layer_traits][model]") {
    const Folder f;
    SECTION("a LayerNorm without bias reads zeros from one vector the Model owns") {
        write_model(f, {{"norm", "layer"}}, {.norm_biases = false});
        const Model m = load_model(f.str());
        REQUIRE(m.zero_norm_bias.size() == static_cast<size_t>(kDim));
        CHECK(std::all_of(m.zero_norm_bias.begin(), m.zero_norm_bias.end(), [](float v) { return v == 0.0f; }));
        CHECK(m.final_norm.bias == m.zero_norm_bias.data());
        CHECK(m.layers[1].ffn_norm.bias == m.zero_norm_bias.data());
        CHECK(m.classifier_bias == nullptr);
    }
    SECTION("LayerNorm biases the file has are used, each alone") {
        Tensors t = write_model(f, {{"norm", "layer"}}, {});
        t.erase("layers.0.attn_norm_bias");
        write_safetensors((f.path / "model.safetensors").string(), t);
        const Model m = load_model(f.str());
        CHECK(m.layers[0].attn_norm.bias == m.zero_norm_bias.data());
        CHECK(m.layers[0].ffn_norm.bias != m.zero_norm_bias.data());
        CHECK(m.layers[0].ffn_norm.bias[0] == t.at("layers.0.ffn_norm_bias").values[0]);
    }
    SECTION("an RMSNorm has no bias: one in the file is a foreign tensor") {
        Tensors t = write_model(f, json::object(), {});
        t["final_norm_bias"] = Tensor{{kDim}, std::vector<float>(kDim, 0.0f)};
        write_safetensors((f.path / "model.safetensors").string(), t);
        CHECK_THROWS_WITH(load_model(f.str()), Catch::Contains("has a tensor 'final_norm_bias' that this model's "
                                                               "architecture does not use"));
    }
    SECTION("post placement: post-norms, and no pre-norms") {
        Tensors t = write_model(f, {{"norm_placement", "post"}}, {});
        const Model m = load_model(f.str());
        CHECK(m.layers[0].attn_norm.weight == nullptr);
        CHECK(m.layers[0].ffn_norm.weight == nullptr);
        CHECK(m.layers[0].post_attn_norm.weight != nullptr);
        CHECK(m.layers[1].post_ffn_norm.weight != nullptr);
        t["layers.1.attn_norm"] = t.at("layers.1.post_attn_norm");
        write_safetensors((f.path / "model.safetensors").string(), t);
        CHECK_THROWS_WITH(load_model(f.str()), Catch::Contains("'layers.1.attn_norm' that this model's architecture"));
        t.erase("layers.1.attn_norm");
        t.erase("layers.0.post_ffn_norm");
        write_safetensors((f.path / "model.safetensors").string(), t);
        CHECK_THROWS_WITH(load_model(f.str()), Catch::Contains("layers.0.post_ffn_norm"));
    }
    SECTION("q/k norms over the projection are [n_heads * head_dim] and [n_kv_heads * head_dim]") {
        Tensors t = write_model(f, {{"qk_norm", "projection"}}, {});
        CHECK(t.at("layers.0.q_norm").shape == std::vector<int64_t>{kHeads * kHeadDim});
        CHECK(t.at("layers.0.k_norm").shape == std::vector<int64_t>{kKvHeads * kHeadDim});
        CHECK_NOTHROW(load_model(f.str()));
        t["layers.0.k_norm"] = Tensor{{kHeadDim}, std::vector<float>(kHeadDim, 1.0f)};  // a per-head norm's width
        write_safetensors((f.path / "model.safetensors").string(), t);
        CHECK_THROWS_WITH(load_model(f.str()), Catch::Contains("layers.0.k_norm"));
    }
    SECTION("classifier_bias: [vocab_size], tied or not") {
        for (bool tied : {false, true}) {
            Tensors t = write_model(f, {{"tied_embeddings", tied}}, {.classifier_bias = true});
            const Model m = load_model(f.str());
            REQUIRE(m.classifier_bias != nullptr);
            CHECK(m.classifier_bias[kVocab - 1] == t.at("classifier_bias").values.back());
            t["classifier_bias"] = Tensor{{kVocab - 1}, std::vector<float>(kVocab - 1, 0.0f)};
            write_safetensors((f.path / "model.safetensors").string(), t);
            CHECK_THROWS_WITH(load_model(f.str()), Catch::Contains("classifier_bias"));
        }
    }
}

}  // namespace
}  // namespace kvx
