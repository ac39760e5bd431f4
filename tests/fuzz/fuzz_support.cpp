#include "fuzz_support.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/tokenizer/bpe_spec.h"

namespace kvx::fuzz {
namespace {

std::string make_scratch_dir() {
    namespace fs = std::filesystem;
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path dir = base / ("kvx_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir.string();
}

}  // namespace

const std::string& scratch_dir() {
    static const std::string dir = make_scratch_dir();
    static const bool cleanup = [] {
        std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
        return true;
    }();
    (void)cleanup;
    return dir;
}

std::string scratch_file(const std::string& name, std::string_view bytes) {
    const std::string path = scratch_dir() + "/" + name;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
}

const BpeTokenizer& chatml_gpt2() {
    static const BpeTokenizer tokenizer = [] {
        BpeTokenizerSpec spec = read_gpt2_tokenizer(KVX_TESTDATA_DIR "/models/gpt2-tokenizer/encoder.json",
                                                    KVX_TESTDATA_DIR "/models/gpt2-tokenizer/vocab.bpe");
        spec.added_tokens.push_back({kImStart, "<|im_start|>", true, false, false, false, false});
        spec.added_tokens.push_back({kImEnd, "<|im_end|>", true, false, false, false, false});
        return BpeTokenizer(spec);
    }();
    return tokenizer;
}

ModelConfig chatml_config() {
    ModelConfig config;
    config.dim = config.hidden_dim = config.head_dim = 2;
    config.n_layers = config.n_heads = config.n_kv_heads = 1;
    config.vocab_size = kVocab;
    config.max_seq_len = 256;
    config.has_chat = true;
    config.chat.format = "chatml";
    return config;
}

void CommaBackend::forward(const ForwardBatch& batch, float* logits) {
    std::fill(logits, logits + batch.logit_rows.size() * kVocab, 0.0f);
    for (size_t i = 0; i < batch.logit_rows.size(); ++i) logits[i * kVocab + 11] = 1.0f;
}

}  // namespace kvx::fuzz
