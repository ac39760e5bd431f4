#include "engine/model/model.h"

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "engine/files/regular_file.h"
#include "kernels/error.h"
#include "kernels/f16.h"

namespace kvx {

bool Model::owns(const void* p) const {
    for (const OwnedBytes& bytes : owned_weights)
        if (bytes.contains(p)) return true;
    return false;
}

void Model::release_pages(const void* p, size_t bytes) const {
    if (weights) weights->release_pages(p, bytes);
    if (gguf) gguf->release_pages(p, bytes);
}

namespace {

// Hands out the tensors of the weights file by name, checking dtype and shape, and remembers which ones were
// taken so that a tensor nobody asked for (a misnamed or foreign weight) is an error rather than ignored.
class WeightReader {
public:
    WeightReader(const SafetensorsFile& file, WeightDtype matrix_dtype, QuantXRounding x_rounding)
        : file_(file), matrix_dtype_(matrix_dtype), x_rounding_(x_rounding) {}

    const float* vector(const std::string& name, int64_t n) { return file_.f32(take(name), {n}); }
    const float* optional_vector(const std::string& name, int64_t n) {
        return file_.contains(name) ? vector(name, n) : nullptr;
    }
    WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
        if (!file_.contains(name) && (file_.contains(name + ".q4") || file_.contains(name + ".q8")))
            return quantized(name, rows, cols);
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
    // A norm's weight [width], and for a LayerNorm its bias "<name>_bias" or, where the file has none,
    // zero_bias [width] (a LayerNorm without bias).
    Norm norm(const std::string& name, int64_t width, const float* zero_bias) {
        const float* bias = zero_bias ? optional_vector(name + "_bias", width) : nullptr;
        return Norm{vector(name, width), bias ? bias : zero_bias};
    }

    // A matrix stored as X.q4 / X.q8 + X.scales (+ X.zero_points or X.mins): every size checked against
    // [rows][cols] and the block size the tensors imply, before a pointer is handed out.
    WeightMatrix quantized(const std::string& name, int64_t rows, int64_t cols) {
        const bool q4 = file_.contains(name + ".q4");
        if (q4 && file_.contains(name + ".q8")) fail(name, "has both a .q4 and a .q8 tensor");
        const std::string q_name = name + (q4 ? ".q4" : ".q8");
        const TensorView& q = file_.tensors().at(q_name);
        const std::string scales_name = name + ".scales";
        if (!file_.contains(scales_name)) fail(name, "is quantized but has no '" + scales_name + "'");
        const TensorView& scales = file_.tensors().at(scales_name);
        if (q.shape.size() != 2 || scales.shape.size() != 2 || q.shape[0] != rows || scales.shape[0] != rows ||
            scales.shape[1] <= 0)
            fail(name, "has " + q_name + " " + shape_text(q.shape) + " and .scales " + shape_text(scales.shape) +
                           ", but the model needs " + std::to_string(rows) + " rows of " + std::to_string(cols));
        if (scales.dtype != "F32" && scales.dtype != "F16") fail(name, ".scales is " + scales.dtype + ", not F32 or F16");
        const int64_t padded = q.shape[1] * (q4 ? 2 : 1);
        const int64_t n_blocks = scales.shape[1];
        const int64_t block = padded / n_blocks;
        const bool power_of_two = block >= 16 && block <= 256 && (block & (block - 1)) == 0;
        if (!power_of_two || block * n_blocks != padded || quant_padded_cols(cols, static_cast<int32_t>(block)) != padded)
            fail(name, "has rows of " + std::to_string(padded) + " quantized values in " + std::to_string(n_blocks) +
                           " blocks: no block size 16..256 (a power of two) pads " + std::to_string(cols) + " columns to that");

        WeightMatrix m;
        m.dtype = q4 ? WeightDtype::q4 : WeightDtype::q8;
        m.rows = rows;
        m.cols = cols;
        m.quant.bits = q4 ? 4 : 8;
        m.quant.block = static_cast<int32_t>(block);
        m.quant.padded_cols = static_cast<int32_t>(padded);
        m.quant.q = file_.tensor(take(q_name), q4 ? "U8" : "I8", {rows, q.shape[1]}).data;
        m.quant.scale_type = scales.dtype == "F16" ? QuantScales::f16 : QuantScales::f32;
        m.quant.x_rounding = x_rounding_;
        m.quant.scales = file_.tensor(take(scales_name), scales.dtype.c_str(), {rows, n_blocks}).data;
        m.data = m.quant.q;

        const std::string zeros_name = name + ".zero_points", mins_name = name + ".mins";
        if (file_.contains(zeros_name) && file_.contains(mins_name)) fail(name, "has both .zero_points and .mins");
        if (file_.contains(zeros_name)) {
            const TensorView& z = file_.tensor(take(zeros_name), q4 ? "U8" : "I8", {rows, n_blocks});
            for (size_t i = 0; q4 && i < z.nbytes; ++i)
                if (z.data[i] > 15) fail(name, ".zero_points holds " + std::to_string(z.data[i]) + ", beyond 4 bits");
            m.quant.offset = QuantOffset::zero_points;
            m.quant.offsets = z.data;
        } else if (file_.contains(mins_name)) {
            m.quant.offset = QuantOffset::mins;
            m.quant.offsets = file_.tensor(take(mins_name), scales.dtype.c_str(), {rows, n_blocks}).data;
        }
        return m;
    }

    void check_all_taken() const {
        for (const auto& [name, view] : file_.tensors())
            if (!taken_.count(name))
                throw Error("weights file '" + file_.path() + "' has a tensor '" + name +
                            "' that this model's architecture does not use");
    }

private:
    const std::string& take(const std::string& name) { return *taken_.insert(name).first; }
    [[noreturn]] void fail(const std::string& name, const std::string& what) const {
        throw Error("weights file '" + file_.path() + "': matrix '" + name + "' " + what);
    }
    static std::string shape_text(const std::vector<int64_t>& shape) {
        std::string text = "[";
        for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
        return text + "]";
    }

    const SafetensorsFile& file_;
    WeightDtype matrix_dtype_;
    QuantXRounding x_rounding_;  // given to every quantized matrix
    std::set<std::string> taken_;
};

}  // namespace

Model load_model_folder(const std::string& model_dir) {
    Model m;
    m.dir = model_dir;
    m.config = load_model_config(model_dir);
    const ModelConfig& c = m.config;
    m.weights = std::make_unique<SafetensorsFile>(file_inside(model_dir, c.weights_file, "weights.file"));
    WeightReader w(*m.weights, c.weights_dtype, c.x_rounding);
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

    // LayerNorm biases the file leaves out are these zeros; RMSNorm has none (a "_bias" is then a foreign tensor).
    if (t.norm_has_bias()) m.zero_norm_bias.assign(static_cast<size_t>(dim), 0.0f);
    const float* zeros = t.norm_has_bias() ? m.zero_norm_bias.data() : nullptr;
    auto norm = [&](const std::string& name) { return offset(w.norm(name, dim, zeros), dim); };

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
        if (c.pre_norms()) layer.attn_norm = norm(p + "attn_norm");
        layer.wq = w.linear(p + "wq", q_dim, dim);
        layer.wk = w.linear(p + "wk", kv_dim, dim);
        layer.wv = w.linear(p + "wv", kv_dim, dim);
        if (c.qk_norm != QkNorm::none) {  // RMSNorm (an RMSNorm family's, checked by the config): no bias
            layer.q_norm = offset(w.norm(p + "q_norm", c.q_norm_width(), nullptr), c.q_norm_width());
            layer.k_norm = offset(w.norm(p + "k_norm", c.k_norm_width(), nullptr), c.k_norm_width());
        }
        layer.wo = w.linear(p + "wo", dim, q_dim);
        if (c.post_norms()) layer.post_attn_norm = norm(p + "post_attn_norm");
        if (c.pre_norms()) layer.ffn_norm = norm(p + "ffn_norm");
        if (t.gated_mlp()) layer.w_gate = w.linear(p + "w_gate", hidden, dim);
        layer.w_up = w.linear(p + "w_up", hidden, dim);
        layer.w_down = w.linear(p + "w_down", dim, hidden);
        if (c.post_norms()) layer.post_ffn_norm = norm(p + "post_ffn_norm");
        m.layers.push_back(layer);
    }
    m.final_norm = norm("final_norm");
    if (c.tied_embeddings) {
        if (m.weights->contains("classifier"))
            throw Error("weights file '" + m.weights->path() + "' has a 'classifier' but the config says it is tied");
        m.classifier = m.tok_embeddings;
    } else {
        m.classifier = w.matrix("classifier", c.vocab_size, dim);
    }
    m.classifier_bias = w.optional_vector("classifier_bias", c.vocab_size);
    w.check_all_taken();
    return m;
}

namespace {

std::string storage_of(const WeightMatrix& w) {
    switch (w.dtype) {
        case WeightDtype::f32:
            return "f32";
        case WeightDtype::f16:
            return "f16";
        case WeightDtype::q8:
        case WeightDtype::q4:
            break;
    }
    const QuantMatrix& q = w.quant;
    const char* offset = q.offset == QuantOffset::zero_points ? ", zero points" : q.offset == QuantOffset::mins ? ", minimums" : "";
    // q.bits: a GGUF's Q6_K loaded into row groups is q6 (kernels/quant_matrix.h), its dtype q8.
    const char* integers = q.bits == 4 ? "q4" : q.bits == 6 ? "q6" : "q8";
    return std::string(integers) + " block " + std::to_string(q.block) + " (" +
           (q.scale_type == QuantScales::f32   ? "fp32 scales"
            : q.scale_type == QuantScales::f16 ? "fp16 scales"
                                               : "int8 scales of fp16 bases per 256") +
           offset + ")";
}

}  // namespace

bool model_has_quantized_matrix(const Model& model) {
    if (model.tok_embeddings.quantized() || model.classifier.quantized() || model.pos_embeddings.quantized()) return true;
    for (const LayerWeights& layer : model.layers)
        for (const Linear* l : layer.linears())
            if (l->weight.quantized()) return true;
    return false;
}

std::string weight_format(const Model& model) {
    std::vector<std::pair<std::string, std::string>> seen;  // storage, the first matrix that has it
    auto note = [&](const WeightMatrix& w, const char* what) {
        if (!w.data) return;
        const std::string storage = storage_of(w);
        for (const auto& s : seen)
            if (s.first == storage) return;
        seen.emplace_back(storage, what);
    };
    for (const LayerWeights& layer : model.layers)
        for (const Linear* l : layer.linears())
            note(l->weight, "");
    note(model.tok_embeddings, " embedding");
    note(model.classifier, " classifier");
    note(model.pos_embeddings, " positions");
    std::string text;
    for (size_t i = 0; i < seen.size(); ++i) text += (i ? ", " : "") + seen[i].first + (i ? seen[i].second : "");
    return text;
}

namespace {

// The non-finite values among count values of an F32 or F16 table.
size_t count_non_finite(const uint8_t* data, size_t count, bool f16) {
    size_t non_finite = 0;
    if (!f16) {
        const float* v = reinterpret_cast<const float*>(data);
        for (size_t i = 0; i < count; ++i) non_finite += std::isfinite(v[i]) ? 0 : 1;
    } else {
        // fp16 with an all-ones exponent is an infinity or a NaN.
        const uint16_t* v = reinterpret_cast<const uint16_t*>(data);
        for (size_t i = 0; i < count; ++i) non_finite += (v[i] & 0x7c00u) == 0x7c00u ? 1 : 0;
    }
    return non_finite;
}

[[noreturn]] void non_finite_error(const std::string& file, const std::string& name, size_t non_finite, size_t count) {
    throw Error("weights file '" + file + "': tensor '" + name + "' holds " + std::to_string(non_finite) +
                " non-finite values (NaN or infinity) of " + std::to_string(count));
}

}  // namespace

void check_weights_finite(const Model& model) {
    if (model.gguf) {  // the F32 and F16 tensors; a block type's scales are read where its kernels read them
        for (const GgufTensor& t : model.gguf->tensors()) {
            if (t.type != GgmlType::f32 && t.type != GgmlType::f16) continue;
            const size_t count = static_cast<size_t>(t.elements());
            if (const size_t bad = count_non_finite(t.data, count, t.type == GgmlType::f16))
                non_finite_error(model.gguf->path(), t.name, bad, count);
        }
        return;
    }
    for (const auto& [name, t] : model.weights->tensors()) {
        if (t.dtype != "F32" && t.dtype != "F16") continue;
        const size_t count = t.nbytes / (t.dtype == "F16" ? 2 : 4);
        if (const size_t bad = count_non_finite(t.data, count, t.dtype == "F16")) non_finite_error(model.weights->path(), name, bad, count);
    }
}

}  // namespace kvx
