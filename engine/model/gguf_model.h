// A GGUF file (llama.cpp's model format) as a kvx Model, read directly: the config from the file's metadata,
// the family's choices as the engine's traits (a row of kGgufFamilies, gguf_model.cpp), the matrices kept as
// the file stores them (gguf_matrix.h), the tokenizer from tokenizer.ggml.* (load_tokenizer, config
// tokenizer_type "gguf"). What the family rows encode of llama.cpp's own choices is in docs/model-format.md,
// "GGUF files".
#pragma once

#include <string>

#include "engine/model/model.h"

namespace kvx {

// Whether `path` names a GGUF file (a regular file that starts with the GGUF magic), rather than a model folder.
bool is_gguf_file(const std::string& path);

// Throws kvx::Error naming the file and the problem: an architecture or tensor type kvx does not run, metadata
// missing or out of range, a tensor missing, of the wrong shape, or one the architecture does not use.
// quant_layout: as load_model's (model.h).
Model load_gguf_model(const std::string& path, QuantLayout quant_layout = QuantLayout::rows);

// The architectures load_gguf_model reads, "llama, qwen2, ...": for messages.
std::string gguf_architecture_names();

}  // namespace kvx
