#include "engine/model.h"

#include "engine/error.h"

namespace kvx {

Model load_model(const std::string& model_dir) {
    Model m;
    m.dir = model_dir;
    m.config = load_model_config(model_dir);
    const ModelConfig& c = m.config;
    m.weights = std::make_unique<SafetensorsFile>(model_dir + "/" + c.weights_file);
    const SafetensorsFile& w = *m.weights;
    const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();

    m.tok_embeddings = w.f32("tok_embeddings", {c.vocab_size, dim});
    m.rope_inv_freq = w.f32("rope_inv_freq", {c.head_dim / 2});
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        m.layers.push_back(LayerWeights{
            w.f32(p + "attn_norm", {dim}),
            w.f32(p + "wq", {q_dim, dim}),
            w.f32(p + "wk", {kv_dim, dim}),
            w.f32(p + "wv", {kv_dim, dim}),
            w.f32(p + "wo", {dim, q_dim}),
            w.f32(p + "ffn_norm", {dim}),
            w.f32(p + "w_gate", {hidden, dim}),
            w.f32(p + "w_up", {hidden, dim}),
            w.f32(p + "w_down", {dim, hidden}),
        });
    }
    m.final_norm = w.f32("final_norm", {dim});
    if (c.tied_embeddings) {
        if (w.contains("classifier"))
            throw Error("weights file '" + w.path() + "' has a 'classifier' but the config says it is tied");
        m.classifier = m.tok_embeddings;
    } else {
        m.classifier = w.f32("classifier", {c.vocab_size, dim});
    }
    return m;
}

}  // namespace kvx
