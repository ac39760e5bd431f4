#include "engine/model/model.h"

#include <cmath>
#include <set>

#include "engine/model/regular_file.h"
#include "kernels/error.h"
#include "kernels/f16.h"

namespace kvx {

void WeightMatrix::row_to_f32(int64_t r, float* out) const {
    if (dtype == WeightDtype::f32) {
        const float* row = f32() + r * cols;
        for (int64_t j = 0; j < cols; ++j) out[j] = row[j];
    } else {
        const uint16_t* row = f16() + r * cols;
        for (int64_t j = 0; j < cols; ++j) out[j] = f16_to_f32(row[j]);
    }
}

namespace {

// Hands out the tensors of the weights file by name, checking dtype and shape, and remembers which ones were
// taken so that a tensor nobody asked for (a misnamed or foreign weight) is an error rather than ignored.
class WeightReader {
public:
    WeightReader(const SafetensorsFile& file, WeightDtype matrix_dtype) : file_(file), matrix_dtype_(matrix_dtype) {}

    const float* vector(const std::string& name, int64_t n) { return file_.f32(take(name), {n}); }
    const float* optional_vector(const std::string& name, int64_t n) {
        return file_.contains(name) ? vector(name, n) : nullptr;
    }
    WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
        WeightMatrix m;
        m.dtype = matrix_dtype_;
        m.rows = rows;
        m.cols = cols;
        if (matrix_dtype_ == WeightDtype::f32)
            m.data = file_.f32(take(name), {rows, cols});
        else
            m.data = file_.f16(take(name), {rows, cols});
        return m;
    }
    // A linear layer; its bias "<name>_bias" is optional.
    Linear linear(const std::string& name, int64_t out_features, int64_t in_features) {
        return Linear{matrix(name, out_features, in_features), optional_vector(name + "_bias", out_features)};
    }
    Norm norm(const std::string& name, int64_t dim, bool with_bias) {
        return Norm{vector(name, dim), with_bias ? vector(name + "_bias", dim) : nullptr};
    }

    void check_all_taken() const {
        for (const auto& [name, view] : file_.tensors())
            if (!taken_.count(name))
                throw Error("weights file '" + file_.path() + "' has a tensor '" + name +
                            "' that this model's architecture does not use");
    }

private:
    const std::string& take(const std::string& name) { return *taken_.insert(name).first; }

    const SafetensorsFile& file_;
    WeightDtype matrix_dtype_;
    std::set<std::string> taken_;
};

}  // namespace

Model load_model(const std::string& model_dir) {
    Model m;
    m.dir = model_dir;
    m.config = load_model_config(model_dir);
    const ModelConfig& c = m.config;
    m.weights = std::make_unique<SafetensorsFile>(file_inside(model_dir, c.weights_file, "weights.file"));
    WeightReader w(*m.weights, c.weights_dtype);
    const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
    const ArchitectureTraits& t = c.traits;
    // A norm weight with the config's offset folded in: (1 + w) rounded to fp32 once here is the factor HF
    // multiplies by (Gemma computes 1.0 + weight.float() in fp32), so the fold changes no bit of the result.
    auto offset = [&](Norm n, int64_t width) {
        if (c.norm_weight_offset == 0.0f || !n.weight) return n;
        std::vector<float>& folded = m.offset_norm_weights.emplace_back(n.weight, n.weight + width);
        for (float& v : folded) v += c.norm_weight_offset;
        n.weight = folded.data();
        return n;
    };

    m.tok_embeddings = w.matrix("tok_embeddings", c.vocab_size, dim);
    if (t.rotary()) {
        const int half = c.rotated_dims() / 2;
        m.rope_inv_freq = w.vector("rope_inv_freq", half);
        if (!c.rope_local_layers.empty()) m.rope_inv_freq_local = w.vector("rope_inv_freq_local", half);
        // Checked always (rotary_dim / 2 floats): a NaN frequency turns every position's rotation into NaN.
        for (const auto& [name, freq] : {std::pair{"rope_inv_freq", m.rope_inv_freq}, {"rope_inv_freq_local", m.rope_inv_freq_local}})
            for (int i = 0; freq && i < half; ++i)
                if (!std::isfinite(freq[i]))
                    throw Error("weights file '" + m.weights->path() + "': " + name + "[" + std::to_string(i) +
                                "] is not a finite number");
    }
    if (t.learned_positions()) m.pos_embeddings = w.matrix("pos_embeddings", c.max_seq_len, dim);
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        LayerWeights layer;
        layer.attn_norm = offset(w.norm(p + "attn_norm", dim, t.norm_has_bias()), dim);
        layer.wq = w.linear(p + "wq", q_dim, dim);
        layer.wk = w.linear(p + "wk", kv_dim, dim);
        layer.wv = w.linear(p + "wv", kv_dim, dim);
        if (c.qk_norm) {
            layer.q_norm = offset(w.norm(p + "q_norm", c.head_dim, false), c.head_dim);
            layer.k_norm = offset(w.norm(p + "k_norm", c.head_dim, false), c.head_dim);
        }
        layer.wo = w.linear(p + "wo", dim, q_dim);
        if (c.sandwich_norms) layer.post_attn_norm = offset(w.norm(p + "post_attn_norm", dim, t.norm_has_bias()), dim);
        layer.ffn_norm = offset(w.norm(p + "ffn_norm", dim, t.norm_has_bias()), dim);
        if (t.gated_mlp()) layer.w_gate = w.linear(p + "w_gate", hidden, dim);
        layer.w_up = w.linear(p + "w_up", hidden, dim);
        layer.w_down = w.linear(p + "w_down", dim, hidden);
        if (c.sandwich_norms) layer.post_ffn_norm = offset(w.norm(p + "post_ffn_norm", dim, t.norm_has_bias()), dim);
        m.layers.push_back(layer);
    }
    m.final_norm = offset(w.norm("final_norm", dim, t.norm_has_bias()), dim);
    if (c.tied_embeddings) {
        if (m.weights->contains("classifier"))
            throw Error("weights file '" + m.weights->path() + "' has a 'classifier' but the config says it is tied");
        m.classifier = m.tok_embeddings;
    } else {
        m.classifier = w.matrix("classifier", c.vocab_size, dim);
    }
    w.check_all_taken();
    return m;
}

void check_weights_finite(const Model& model) {
    for (const auto& [name, t] : model.weights->tensors()) {
        size_t non_finite = 0;
        const size_t count = t.nbytes / (t.dtype == "F16" ? 2 : 4);
        if (t.dtype == "F32") {
            const float* v = reinterpret_cast<const float*>(t.data);
            for (size_t i = 0; i < count; ++i) non_finite += std::isfinite(v[i]) ? 0 : 1;
        } else if (t.dtype == "F16") {
            // fp16 with an all-ones exponent is an infinity or a NaN.
            const uint16_t* v = reinterpret_cast<const uint16_t*>(t.data);
            for (size_t i = 0; i < count; ++i) non_finite += (v[i] & 0x7c00u) == 0x7c00u ? 1 : 0;
        }
        if (non_finite > 0)
            throw Error("weights file '" + model.weights->path() + "': tensor '" + name + "' holds " +
                        std::to_string(non_finite) + " non-finite values (NaN or infinity) of " + std::to_string(count));
    }
}

}  // namespace kvx
