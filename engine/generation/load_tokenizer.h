// The tokenizer a converted model names in its config.json: llama2.c's tokenizer.bin, HF's tokenizer.json,
// or GPT-2's encoder.json with vocab.bpe, each behind the Tokenizer interface; or, for a model read from a GGUF
// file (tokenizer_type "gguf", model_dir the file), the file's own (engine/tokenizer/gguf_tokenizer.h).
#pragma once

#include <memory>
#include <string>

#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx {

// Throws kvx::Error when the model has no tokenizer, or its tokenizer is unreadable or does not fit the
// model's vocabulary.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir, const ModelConfig& config);

}  // namespace kvx
