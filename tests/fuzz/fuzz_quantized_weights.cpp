// The loader's reading of quantized matrices (engine/model/model.cpp, docs/model-format.md "Quantized
// matrices"): the input is the weights file of a fixed one-layer model, whose matrices may be stored as
// X.q4 / X.q8 with scales, zero points or minimums of any shape and dtype. Every matrix the loader accepts is
// dequantized row by row, end to end: integers, scales and offsets it handed out past their tensors would fault.
#include <vector>

#include "engine/model/model.h"
#include "fuzz_support.h"

namespace {

// dim 32, hidden 64, one layer of 2 heads (1 KV head) of 16, vocabulary 16, tied embeddings.
constexpr char kConfig[] = R"({"format": "kvx-model", "format_version": 1, "architecture": "llama", "dim": 32,
  "hidden_dim": 64, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "head_dim": 16, "vocab_size": 16,
  "max_seq_len": 64, "norm_eps": 1e-05, "rope_style": "half", "tied_embeddings": true, "bos_token_id": 1,
  "eos_token_ids": [2], "weights": {"file": "model.safetensors", "dtype": "f32"}})";

void read_whole(const kvx::WeightMatrix& w, std::vector<float>& row) {
    row.resize(static_cast<size_t>(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) w.row_to_f32(r, row.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    fuzz::scratch_file("config.json", kConfig);
    fuzz::scratch_file("model.safetensors", fuzz::as_text(data, size));
    fuzz::accepted_or_refused([&] {
        const Model model = load_model(fuzz::scratch_dir());
        std::vector<float> row;
        read_whole(model.tok_embeddings, row);
        for (const LayerWeights& layer : model.layers)
            for (const Linear* l : layer.linears())
                read_whole(l->weight, row);
    });
    return 0;
}
